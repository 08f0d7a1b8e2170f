//! Dense ids for the keys of the heap's panes, so a sliding window's firing
//! merges its panes without hashing a key.
//!
//! A sliding window spans several panes. Merging them into a new hash map
//! per window hashed and compared every key of every pane for each window
//! fired (a window of 10 panes, 10 pane maps per firing). Instead, each key
//! held by a pane gets an id when it enters its first pane (one lookup per
//! (key, pane), not per record), each pane entry keeps it, and a firing
//! merges into a dense array indexed by id: a scan of the window's pane
//! tables, an array slot per entry, no hash.
//!
//! Invariants: an id is held by as many pane entries as `refs` counts; an id
//! whose count falls to zero is out of the index and reused; a slot of
//! `merged` is this firing's only when its stamp is the firing's.

use hashbrown::{HashTable, hash_table};
use rustc_hash::FxBuildHasher;
use std::hash::{BuildHasher, Hash};

/// The id of an entry of a pane without key ids (tumbling windows).
pub(super) const NO_ID: u32 = u32::MAX;

/// The hash the id index files a key under.
#[inline]
fn fx_hash<K: Hash + ?Sized>(key: &K) -> u64 {
    FxBuildHasher.hash_one(key)
}

/// Key → dense id, with per id its number of pane entries and the merge
/// array of the firings.
pub(super) struct KeyIds<K, ACC> {
    /// Id → key (a free id's is the last key it had).
    keys: Vec<K>,
    /// Id → pane entries holding it.
    refs: Vec<u32>,
    /// Ids no pane holds, reused before new ones.
    free: Vec<u32>,
    /// Key → id.
    index: HashTable<u32>,
    /// Id → (stamp of the firing that last wrote it, merged accumulator).
    merged: Vec<(u64, Option<ACC>)>,
    /// Ids written by the current firing, in order.
    touched: Vec<u32>,
    /// Counts the firings.
    stamp: u64,
}

impl<K, ACC> Default for KeyIds<K, ACC> {
    fn default() -> Self {
        KeyIds {
            keys: Vec::new(),
            refs: Vec::new(),
            free: Vec::new(),
            index: HashTable::new(),
            merged: Vec::new(),
            touched: Vec::new(),
            stamp: 0,
        }
    }
}

impl<K: Hash + Eq + Clone, ACC> KeyIds<K, ACC> {
    /// `key`'s id for one more pane entry (a new id, the key copied, when
    /// no pane holds the key).
    pub(super) fn acquire(&mut self, key: &K) -> u32 {
        let keys = &mut self.keys;
        let entry = self.index.entry(
            fx_hash(key),
            |&i| keys[i as usize] == *key,
            |&i| fx_hash(&keys[i as usize]),
        );
        let id = match entry {
            hash_table::Entry::Occupied(e) => *e.get(),
            hash_table::Entry::Vacant(v) => {
                let id = match self.free.pop() {
                    Some(id) => {
                        keys[id as usize] = key.clone();
                        id
                    }
                    None => {
                        let id = u32::try_from(keys.len())
                            .ok()
                            .filter(|&id| id != NO_ID)
                            .expect("fewer than 2^32 - 1 keys in a subtask's panes");
                        keys.push(key.clone());
                        self.refs.push(0);
                        self.merged.push((0, None));
                        id
                    }
                };
                v.insert(id);
                id
            }
        };
        self.refs[id as usize] += 1;
        id
    }

    /// One pane entry less holds `id`; the id is freed with the last.
    pub(super) fn release(&mut self, id: u32) {
        let Some(refs) = self.refs.get_mut(id as usize) else {
            return;
        };
        *refs -= 1;
        if *refs == 0 {
            let hash = fx_hash(&self.keys[id as usize]);
            if let Ok(e) = self.index.find_entry(hash, |&i| i == id) {
                e.remove();
            }
            self.merged[id as usize].1 = None;
            self.free.push(id);
        }
    }

    /// Forgets every id.
    pub(super) fn clear(&mut self) {
        *self = KeyIds::default();
    }

    /// Merges `entries` (each pane's `(id, accumulator)`s, over the panes
    /// of a window) per id, then calls `emit` once per key with its merged
    /// accumulator; stops at `emit`'s first error.
    pub(super) fn merge_and_emit<'a, E>(
        &mut self,
        entries: impl Iterator<Item = (u32, &'a ACC)>,
        merge: impl Fn(ACC, ACC) -> ACC,
        mut emit: impl FnMut(&K, &ACC) -> Result<(), E>,
    ) -> Result<(), E>
    where
        ACC: Clone + 'a,
    {
        self.stamp += 1;
        let stamp = self.stamp;
        self.touched.clear();
        for (id, acc) in entries {
            let slot = &mut self.merged[id as usize];
            if slot.0 == stamp {
                slot.1 = match slot.1.take() {
                    Some(m) => Some(merge(m, acc.clone())),
                    None => Some(acc.clone()),
                };
            } else {
                *slot = (stamp, Some(acc.clone()));
                self.touched.push(id);
            }
        }
        let mut result = Ok(());
        for &id in &self.touched {
            let (_, acc) = &mut self.merged[id as usize];
            if let Some(acc) = acc.take()
                && result.is_ok()
            {
                result = emit(&self.keys[id as usize], &acc);
            }
        }
        result
    }
}
