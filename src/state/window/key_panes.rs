//! The heap's panes of sliding windows, kept per key.
//!
//! A sliding window spans several panes, and a firing that merged the
//! windows' pane maps into a new map rehashed every key of every pane for
//! each window (a window of 10 panes merged 10 maps per firing). Here each
//! key has a slot holding its panes' accumulators in time order, and each
//! pane the list of the slots it has accumulators in: a firing walks the
//! slot lists of its panes, merges each slot's few accumulators inside the
//! window once (a stamp per slot marks the keys done), and hashes nothing.
//!
//! Invariants: a slot's accumulators are sorted by pane start; a pane's list
//! names each slot holding an accumulator for it exactly once; a slot without
//! accumulators is free (out of the key index, its queue's allocation kept
//! for the next key); panes are dropped oldest first, so a dropped pane's
//! accumulator is the first of each of its slots.

use floe_actors::element::Timestamp;
use hashbrown::{HashTable, hash_table};
use rustc_hash::FxBuildHasher;
use std::collections::VecDeque;
use std::hash::{BuildHasher, Hash};

/// The hash the key index files a key under.
#[inline]
fn fx_hash<K: Hash + ?Sized>(key: &K) -> u64 {
    FxBuildHasher.hash_one(key)
}

/// One key's accumulators, one per pane it has records in.
struct Slot<K, ACC> {
    /// The key (a free slot's is the last key it held).
    key: K,
    /// `(pane start, accumulator)`, sorted by start.
    panes: VecDeque<(Timestamp, ACC)>,
    /// The firing that last emitted this key (see [`KeyPanes::stamp`]).
    stamp: u64,
}

/// Panes of sliding windows: per key its accumulators, per pane its keys.
pub(super) struct KeyPanes<K, ACC> {
    slots: Vec<Slot<K, ACC>>,
    /// Free slots, reused before the vector grows.
    free: Vec<u32>,
    /// Key → index of its slot.
    index: HashTable<u32>,
    /// Pane starts, sorted, each with the slots holding an accumulator for it.
    panes: VecDeque<(Timestamp, Vec<u32>)>,
    /// Counts the firings, so a key in several of a window's panes is
    /// emitted once without a set of the keys done.
    stamp: u64,
}

impl<K, ACC> Default for KeyPanes<K, ACC> {
    fn default() -> Self {
        KeyPanes {
            slots: Vec::new(),
            free: Vec::new(),
            index: HashTable::new(),
            panes: VecDeque::new(),
            stamp: 0,
        }
    }
}

/// `panes`' accumulators of the panes starting in `from..to`, merged.
#[inline]
fn merge_range<ACC: Clone>(
    panes: &VecDeque<(Timestamp, ACC)>,
    from: Timestamp,
    to: Timestamp,
    merge: &impl Fn(ACC, ACC) -> ACC,
) -> Option<ACC> {
    // The window's are near the front: only panes still held for a later
    // window or for their lateness come before them.
    let mut merged: Option<ACC> = None;
    for (p, acc) in panes {
        if *p < from {
            continue;
        }
        if *p >= to {
            break;
        }
        merged = Some(match merged.take() {
            None => acc.clone(),
            Some(m) => merge(m, acc.clone()),
        });
    }
    merged
}

impl<K: Hash + Eq + Clone, ACC> KeyPanes<K, ACC> {
    /// The index of `key`'s slot, if it has one.
    #[inline]
    fn find(&self, key: &K) -> Option<u32> {
        let slots = &self.slots;
        self.index
            .find(fx_hash(key), |&i| slots[i as usize].key == *key)
            .copied()
    }

    /// The index of `key`'s slot, a free one taken (the key copied) when
    /// it has none.
    #[inline]
    fn slot(&mut self, key: &K) -> u32 {
        let slots = &mut self.slots;
        let entry = self.index.entry(
            fx_hash(key),
            |&i| slots[i as usize].key == *key,
            |&i| fx_hash(&slots[i as usize].key),
        );
        match entry {
            hash_table::Entry::Occupied(e) => *e.get(),
            hash_table::Entry::Vacant(v) => {
                let i = match self.free.pop() {
                    Some(i) => {
                        slots[i as usize].key = key.clone();
                        i
                    }
                    None => {
                        let i = u32::try_from(slots.len()).expect("fewer than 2^32 keys");
                        slots.push(Slot {
                            key: key.clone(),
                            panes: VecDeque::new(),
                            stamp: 0,
                        });
                        i
                    }
                };
                v.insert(i);
                i
            }
        }
    }

    /// Lists slot `i` in `pane`'s keys; whether the pane is new.
    #[inline]
    fn list(&mut self, pane: Timestamp, i: u32) -> bool {
        // Nearly always the latest pane.
        if let Some((p, keys)) = self.panes.back_mut()
            && *p == pane
        {
            keys.push(i);
            return false;
        }
        match self.panes.binary_search_by_key(&pane, |(s, _)| *s) {
            Ok(at) => {
                self.panes[at].1.push(i);
                false
            }
            Err(at) => {
                self.panes.insert(at, (pane, vec![i]));
                true
            }
        }
    }

    /// Adds to `key`'s accumulator in `pane` (made with `init` when
    /// absent); whether the pane is new.
    #[inline]
    pub(super) fn add(
        &mut self,
        pane: Timestamp,
        key: &K,
        init: impl FnOnce() -> ACC,
        add: impl FnOnce(&mut ACC),
    ) -> bool {
        let i = self.slot(key);
        let list = &mut self.slots[i as usize].panes;
        // Records come about in time order: the key's pane is nearly
        // always its last; a record of an older pane (out of order, or
        // from a split of the input further behind) is found by search.
        let at = match list.back_mut() {
            Some((p, acc)) if *p == pane => {
                add(acc);
                return false;
            }
            Some((p, _)) if *p < pane => list.len(),
            None => 0,
            Some(_) => match list.binary_search_by_key(&pane, |(p, _)| *p) {
                Ok(at) => {
                    add(&mut list[at].1);
                    return false;
                }
                Err(at) => at,
            },
        };
        let mut acc = init();
        add(&mut acc);
        list.insert(at, (pane, acc));
        self.list(pane, i)
    }

    /// Sets `key`'s accumulator in `pane` (a restore).
    pub(super) fn put(&mut self, key: &K, pane: Timestamp, acc: ACC) {
        let i = self.slot(key);
        let list = &mut self.slots[i as usize].panes;
        match list.binary_search_by_key(&pane, |(p, _)| *p) {
            Ok(at) => list[at].1 = acc,
            Err(at) => {
                list.insert(at, (pane, acc));
                self.list(pane, i);
            }
        }
    }

    /// `key`'s accumulators of the panes starting in `from..to`, merged.
    pub(super) fn merged(
        &self,
        key: &K,
        from: Timestamp,
        to: Timestamp,
        merge: impl Fn(ACC, ACC) -> ACC,
    ) -> Option<ACC>
    where
        ACC: Clone,
    {
        let i = self.find(key)?;
        merge_range(&self.slots[i as usize].panes, from, to, &merge)
    }

    /// Calls `emit` once for every key with accumulators in the panes
    /// starting in `from..to`, with those merged.
    pub(super) fn for_window<E>(
        &mut self,
        from: Timestamp,
        to: Timestamp,
        merge: impl Fn(ACC, ACC) -> ACC,
        mut emit: impl FnMut(&K, &ACC) -> Result<(), E>,
    ) -> Result<(), E>
    where
        ACC: Clone,
    {
        self.stamp += 1;
        let stamp = self.stamp;
        let lo = self.panes.partition_point(|(p, _)| *p < from);
        let hi = self.panes.partition_point(|(p, _)| *p < to);
        for (_, keys) in self.panes.range(lo..hi) {
            for &i in keys {
                let slot = &mut self.slots[i as usize];
                if slot.stamp == stamp {
                    continue;
                }
                slot.stamp = stamp;
                let mut inside = slot
                    .panes
                    .iter()
                    .skip_while(|(p, _)| *p < from)
                    .take_while(|(p, _)| *p < to);
                let Some((_, first)) = inside.next() else {
                    continue;
                };
                match inside.next() {
                    // One pane: its accumulator is the result.
                    None => emit(&slot.key, first)?,
                    Some(_) => {
                        if let Some(acc) = merge_range(&slot.panes, from, to, &merge) {
                            emit(&slot.key, &acc)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The start of the first pane.
    #[inline]
    pub(super) fn first(&self) -> Option<Timestamp> {
        self.panes.front().map(|(p, _)| *p)
    }

    /// Drops the first pane: its accumulator is the first of each of its
    /// keys' slots; a slot left empty is freed.
    pub(super) fn pop_first(&mut self) {
        let Some((pane, keys)) = self.panes.pop_front() else {
            return;
        };
        for i in keys {
            let slot = &mut self.slots[i as usize];
            match slot.panes.front() {
                Some((p, _)) if *p == pane => {
                    slot.panes.pop_front();
                }
                // Not the first: only if panes were dropped out of order,
                // which the operator never does.
                _ => slot.panes.retain(|(p, _)| *p != pane),
            }
            if slot.panes.is_empty() {
                let hash = fx_hash(&slot.key);
                if let Ok(e) = self.index.find_entry(hash, |&j| j == i) {
                    e.remove();
                }
                self.free.push(i);
            }
        }
    }

    /// (key, pane) accumulators held.
    pub(super) fn entries(&self) -> usize {
        self.panes.iter().map(|(_, keys)| keys.len()).sum()
    }

    /// Every key with its accumulators, in time order.
    pub(super) fn per_key(&self) -> impl Iterator<Item = (&K, Vec<(Timestamp, &ACC)>)> {
        self.slots
            .iter()
            .filter(|s| !s.panes.is_empty())
            .map(|s| (&s.key, s.panes.iter().map(|(p, acc)| (*p, acc)).collect()))
    }

    /// Drops everything.
    pub(super) fn clear(&mut self) {
        *self = KeyPanes::default();
    }
}
