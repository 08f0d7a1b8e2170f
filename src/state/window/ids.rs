//! The key ids of the heap panes, and a sliding window's merge kept by id.
//!
//! [`Keys`] gives each key of a subtask's panes a dense id, so the panes
//! hold ids and a record hashes its key once; [`Running`] is the last
//! fired window's merge, an array found by id, moved to the next window by
//! retracting the panes that left and merging those that entered.

use super::heap::OPERATOR;
use crate::state::StateError;
use floe_actors::element::Timestamp;
use hashbrown::{HashTable, hash_table};
use rustc_hash::FxBuildHasher;
use std::hash::{BuildHasher, Hash};

/// The hash a key of a pane is filed under in [`Keys`].
#[inline]
pub(super) fn fx_hash<K: Hash + ?Sized>(key: &K) -> u64 {
    FxBuildHasher.hash_one(key)
}

/// A key's id in a subtask's [`Keys`]: panes and windows hold ids, not keys.
pub(super) type KeyId = u32;

/// The hash a pane table files a key id under: ids are dense, and an odd
/// multiplier keeps distinct ids in distinct buckets (the low bits) while
/// spreading them over the high bits (hashbrown's tags).
#[inline]
pub(super) fn id_hash(id: KeyId) -> u64 {
    u64::from(id).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// A pane's table: `(key id, accumulator)`.
pub(super) type Pane<ACC> = HashTable<(KeyId, ACC)>;

/// Idle ids (in no pane) that [`Keys`] keeps before it frees them, and
/// then only while they are at least as many as the ids in use.
pub(super) const KEEP_IDLE: usize = if cfg!(test) { 4 } else { 4096 };

/// The keys of a subtask's panes, each once, under a dense id: a record
/// hashes its key once, here; its pane finds the id by an integer hash,
/// and a sliding window merges panes by id, with no key hashed or
/// compared. An id no pane holds stays idle (found again when its key
/// comes back) until idle ids outnumber those in use, when they are freed
/// for new keys.
pub(super) struct Keys<K> {
    /// Ids, filed by their keys' hashes.
    pub(super) index: HashTable<KeyId>,
    /// Per id, its key (a freed id's until the id is reused): apart from
    /// the rest, so a firing reading keys by id touches only keys.
    keys: Vec<K>,
    /// Per id, its key's hash.
    hashes: Vec<u64>,
    /// Per id, how many pane tables hold it.
    panes: Vec<u32>,
    /// Freed ids.
    free: Vec<KeyId>,
    /// Ids in `index` that no pane holds.
    idle: usize,
}

impl<K> Default for Keys<K> {
    fn default() -> Self {
        Keys {
            index: HashTable::new(),
            keys: Vec::new(),
            hashes: Vec::new(),
            panes: Vec::new(),
            free: Vec::new(),
            idle: 0,
        }
    }
}

impl<K: Eq + Clone> Keys<K> {
    /// `key`'s id, if it has one.
    #[inline]
    pub(super) fn find(&self, key: &K, hash: u64) -> Option<KeyId> {
        let keys = &self.keys;
        self.index
            .find(hash, |&id| keys[id as usize] == *key)
            .copied()
    }

    /// `key`'s id (its hash is `hash`), made when it has none. A new id is
    /// idle until a pane takes it ([`Keys::take`]).
    #[inline]
    pub(super) fn id(&mut self, key: &K, hash: u64) -> Result<KeyId, StateError> {
        let (keys, hashes) = (&self.keys, &self.hashes);
        let entry = self.index.entry(
            hash,
            |&id| keys[id as usize] == *key,
            |&id| hashes[id as usize],
        );
        match entry {
            hash_table::Entry::Occupied(e) => Ok(*e.get()),
            hash_table::Entry::Vacant(v) => {
                let id = match self.free.pop() {
                    Some(id) => {
                        let i = id as usize;
                        (self.keys[i], self.hashes[i], self.panes[i]) = (key.clone(), hash, 0);
                        id
                    }
                    None => {
                        let id =
                            KeyId::try_from(self.keys.len()).map_err(|_| StateError::Storage {
                                operator: OPERATOR.into(),
                                source: "a window subtask holds more than 4,294,967,295 keys"
                                    .into(),
                            })?;
                        self.keys.push(key.clone());
                        self.hashes.push(hash);
                        self.panes.push(0);
                        id
                    }
                };
                v.insert(id);
                self.idle += 1;
                Ok(id)
            }
        }
    }
}

impl<K> Keys<K> {
    /// The key of `id`.
    #[inline]
    pub(super) fn key(&self, id: KeyId) -> &K {
        &self.keys[id as usize]
    }

    /// The ids a key id can take: an array indexed by id needs this length.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.keys.len()
    }

    /// A pane took `id`.
    #[inline]
    pub(super) fn take(&mut self, id: KeyId) {
        let panes = &mut self.panes[id as usize];
        if *panes == 0 {
            self.idle -= 1;
        }
        *panes += 1;
    }

    /// A pane table is cleared or freed: its ids are released, and idle
    /// ids freed once they outnumber those in use.
    pub(super) fn release<ACC>(&mut self, pane: &Pane<ACC>) {
        for (id, _) in pane {
            let panes = &mut self.panes[*id as usize];
            *panes -= 1;
            if *panes == 0 {
                self.idle += 1;
            }
        }
        if self.idle > KEEP_IDLE && self.idle * 2 > self.index.len() {
            let (panes, free) = (&self.panes, &mut self.free);
            self.index.retain(|id| {
                let used = panes[*id as usize] > 0;
                if !used {
                    free.push(*id);
                }
                used
            });
            self.idle = 0;
        }
    }
}

/// A key's accumulator in a [`Running`] merge.
struct Merged<ACC> {
    id: KeyId,
    /// How many of the merged panes hold the key.
    panes: u32,
    acc: ACC,
}

/// No place in [`Running::merged`]: the key is in no merged pane.
const ABSENT: u32 = u32::MAX;

/// A window's accumulators merged from the panes starting in `from..to`,
/// one after another, found by key id through an array of places. Every
/// change to such a pane (a record added, the pane dropped) is applied
/// here too, so it stays the merge of its panes.
pub(super) struct Running<ACC> {
    pub(super) from: Timestamp,
    pub(super) to: Timestamp,
    /// The merged accumulators, in no order: a firing reads them in a row.
    merged: Vec<Merged<ACC>>,
    /// Per key id, its place in `merged`, or [`ABSENT`].
    at: Vec<u32>,
    /// Panes dropped while covered: still merged in, retracted at the next
    /// move (and their ids released then).
    pub(super) dropped: Vec<Pane<ACC>>,
}

impl<ACC: Clone> Running<ACC> {
    /// An empty merge of `from..to`, reusing `old`'s arrays.
    pub(super) fn new(from: Timestamp, to: Timestamp, old: Option<Running<ACC>>) -> Running<ACC> {
        let (mut merged, mut at) = old.map(|r| (r.merged, r.at)).unwrap_or_default();
        for m in merged.drain(..) {
            at[m.id as usize] = ABSENT;
        }
        Running {
            from,
            to,
            merged,
            at,
            dropped: Vec::new(),
        }
    }

    #[inline]
    pub(super) fn covers(&self, pane: Timestamp) -> bool {
        self.from <= pane && pane < self.to
    }

    /// Room for every id of `keys`.
    #[inline]
    pub(super) fn fit<K>(&mut self, keys: &Keys<K>) {
        if self.at.len() < keys.len() {
            self.at.resize(keys.len(), ABSENT);
        }
    }

    /// Adds `id`'s first accumulator.
    #[inline]
    fn insert(&mut self, id: KeyId, acc: ACC) {
        // Never more accumulators than key ids, which fit a `u32`.
        self.at[id as usize] = self.merged.len() as u32;
        self.merged.push(Merged { id, panes: 1, acc });
    }

    /// Merges a pane's accumulators in.
    pub(super) fn enter(&mut self, pane: &Pane<ACC>, merge: &impl Fn(ACC, ACC) -> ACC) {
        for (id, acc) in pane {
            match self.merged.get_mut(self.at[*id as usize] as usize) {
                Some(m) => {
                    let prev = std::mem::replace(&mut m.acc, acc.clone());
                    m.acc = merge(prev, acc.clone());
                    m.panes += 1;
                }
                None => self.insert(*id, acc.clone()),
            }
        }
    }

    /// Takes a pane's accumulators back out; false when the aggregate
    /// refuses one (the merge is then no merge of anything).
    pub(super) fn leave(
        &mut self,
        pane: &Pane<ACC>,
        retract: &impl Fn(&mut ACC, &ACC) -> bool,
    ) -> bool {
        for (id, acc) in pane {
            let place = self.at.get(*id as usize).map_or(ABSENT, |&at| at) as usize;
            let Some(m) = self.merged.get_mut(place) else {
                return false;
            };
            if m.panes == 1 {
                self.at[*id as usize] = ABSENT;
                self.merged.swap_remove(place);
                if let Some(moved) = self.merged.get(place) {
                    self.at[moved.id as usize] = place as u32;
                }
            } else if retract(&mut m.acc, acc) {
                m.panes -= 1;
            } else {
                return false;
            }
        }
        true
    }

    /// How many keys the merge holds.
    pub(super) fn len(&self) -> usize {
        self.merged.len()
    }

    /// The merged accumulators, with their key ids.
    pub(super) fn iter(&self) -> impl Iterator<Item = (KeyId, &ACC)> {
        self.merged.iter().map(|m| (m.id, &m.acc))
    }
}

/// A record added to `id`'s accumulator of a pane that `r` covers: added
/// to `r`'s too (a key new to the pane counts one more pane).
#[cold]
pub(super) fn add_running<K, ACC: Clone>(
    r: &mut Running<ACC>,
    keys: &Keys<K>,
    id: KeyId,
    new_key: bool,
    init: impl Fn() -> ACC,
    add: impl Fn(&mut ACC),
) {
    r.fit(keys);
    match r.merged.get_mut(r.at[id as usize] as usize) {
        Some(m) => {
            add(&mut m.acc);
            m.panes += u32::from(new_key);
        }
        None => {
            let mut acc = init();
            add(&mut acc);
            r.insert(id, acc);
        }
    }
}
