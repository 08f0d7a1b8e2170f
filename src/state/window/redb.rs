//! The redb backend's window stores: windows in a [`RedbStateBackend`].
//!
//! [`RedbWindows`] keeps each key's windows as one value of the backend
//! (state `windows`, or `panes` for [`RedbPanes`]): a record's update is a
//! cache hit like any keyed state's, a key past the cache is read from the
//! database, and the backend's snapshots — incremental ones included, with
//! their chain of completed checkpoints — are the store's.
//!
//! [`RedbPanes`] is key-major where the heap's panes are time-major: the
//! accumulators are in the backend, each key's panes one short sorted
//! list, and in memory stays an index of the keys of each pane (a key per
//! (key, pane), as a keyed process function keeps a timer per key and
//! window). A window fires by reading the lists of its panes' keys (cache
//! hits, or database reads past the cache); dropping a pane removes it
//! from the lists of its keys. The index is rebuilt from the stored lists
//! on restore.

use super::{PaneStore, StoreSnapshots, WindowCapture, WindowStore, WindowVisitor};
use crate::state::scope::typed_table;
use crate::state::table::KeyedTable;
use crate::state::{
    CheckpointChain, KeyGroupBytes, RedbStateBackend, StateBackend, StateError, StateKey,
    StateValue, ValueStateDescriptor,
};
use floe_actors::element::Timestamp;
use floe_actors::ids::CheckpointId;
use floe_actors::keygroup::key_group;
use floe_actors::snapshot::{BlobRef, PersistedHook};
use rustc_hash::FxHashSet;
use std::collections::BTreeMap;

/// The second half of each key group's bytes: says they hold a redb window
/// store's state (a keyed process function's second half is its timers).
const WINDOW_TAG: &[u8] = b"floe-window-store-v1";

/// Whether `bytes` end with the postcard encoding of [`WINDOW_TAG`] (a
/// length byte, then the tag): a redb window store's key group, which a
/// heap store refuses rather than misreads.
pub(super) fn is_tagged(bytes: &[u8]) -> bool {
    let n = WINDOW_TAG.len();
    bytes.len() > n && bytes.ends_with(WINDOW_TAG) && bytes[bytes.len() - n - 1] as usize == n
}

/// No TTL on window state: the processing time of an access is not read.
const NOW: Timestamp = 0;

/// Per key, its windows, as values of a redb state backend.
pub struct RedbWindows<K, W, ACC> {
    backend: RedbStateBackend<K>,
    desc: ValueStateDescriptor<Vec<(W, ACC)>>,
    chain: CheckpointChain,
    max_parallelism: u32,
}

impl<K: StateKey, W: StateValue, ACC: StateValue> RedbWindows<K, W, ACC> {
    /// The windows kept in `backend` as the state `windows`.
    pub fn new(backend: RedbStateBackend<K>) -> Self {
        Self::named(backend, "windows")
    }

    fn named(backend: RedbStateBackend<K>, state: &str) -> Self {
        RedbWindows {
            max_parallelism: backend.max_parallelism(),
            backend,
            desc: ValueStateDescriptor::new(state),
            chain: CheckpointChain::default(),
        }
    }

    fn table(&mut self) -> Result<&mut dyn KeyedTable<K, Vec<(W, ACC)>>, StateError> {
        typed_table(&mut self.backend, &self.desc)
    }

    #[inline]
    fn group(&self, key: &K) -> u32 {
        key_group(key, self.max_parallelism)
    }

    fn mismatch(&self) -> StateError {
        StateError::SchemaMismatch {
            operator: self.backend.operator().to_string(),
            state: self.desc.name().to_string(),
            expected: "windows of a redb window store (--state redb)".into(),
            found: "windows of another state backend, or another operator's state".into(),
        }
    }
}

impl<K: StateKey, W: StateValue, ACC: StateValue> StoreSnapshots for RedbWindows<K, W, ACC> {
    fn capture(
        &mut self,
        _: u32,
        checkpoint: CheckpointId,
        savepoint: bool,
    ) -> Result<WindowCapture, StateError> {
        // The table exists before the first snapshot, so that its
        // fingerprint is in every capture.
        self.table()?;
        let snapshot = self.backend.snapshot_for(checkpoint, savepoint);
        // An incremental snapshot builds on the blobs of the last completed
        // checkpoint, which the backend only learns from `chain`.
        let base: Vec<BlobRef> = match snapshot.base() {
            None => Vec::new(),
            Some(b) => {
                self.chain
                    .base_blobs(CheckpointId(b))
                    .ok_or_else(|| StateError::Storage {
                        operator: self.backend.operator().to_string(),
                        source: format!("keyed state of base checkpoint {b} unknown").into(),
                    })?
            }
        };
        let chain = self.chain.clone();
        let persisted = (!savepoint).then(|| {
            Box::new(move |blobs: &[BlobRef]| chain.persisted(checkpoint, blobs)) as PersistedHook
        });
        let operator = self.backend.operator().to_string();
        let groups = Box::new(move || {
            snapshot
                .serialize()?
                .into_iter()
                .map(|g| {
                    let bytes = postcard::to_allocvec(&(g.bytes, WINDOW_TAG)).map_err(|e| {
                        StateError::Serde {
                            operator: operator.clone(),
                            state: String::new(),
                            source: e.into(),
                        }
                    })?;
                    Ok(KeyGroupBytes {
                        key_group: g.key_group,
                        bytes,
                    })
                })
                .collect()
        });
        Ok(WindowCapture {
            groups,
            base,
            persisted,
        })
    }

    fn restore(&mut self, groups: &[KeyGroupBytes]) -> Result<(), StateError> {
        let mut state = Vec::with_capacity(groups.len());
        for g in groups {
            let (bytes, tag): (Vec<u8>, Vec<u8>) =
                postcard::from_bytes(&g.bytes).map_err(|_| self.mismatch())?;
            if tag != WINDOW_TAG {
                return Err(self.mismatch());
            }
            if !bytes.is_empty() {
                state.push(KeyGroupBytes {
                    key_group: g.key_group,
                    bytes,
                });
            }
        }
        self.backend.restore(&state)?;
        self.chain.reset();
        // Checks the restored state's fingerprint now, not at first use.
        self.table()?;
        Ok(())
    }

    fn checkpoint_complete(&mut self, checkpoint: CheckpointId) {
        if self.chain.complete(checkpoint) {
            self.backend.notify_checkpoint_complete(checkpoint);
        }
    }

    fn checkpoint_aborted(&mut self, checkpoint: CheckpointId) {
        self.chain.abort(checkpoint);
    }

    /// Keys holding windows (a key's windows are one entry).
    fn entries(&self) -> usize {
        self.backend.entries(self.desc.name())
    }
}

impl<K: StateKey, W: StateValue, ACC: StateValue> WindowStore<K, W, ACC>
    for RedbWindows<K, W, ACC>
{
    fn get(&mut self, key: &K) -> Result<Option<&Vec<(W, ACC)>>, StateError> {
        let g = self.group(key);
        self.table()?.get(g, key, NOW)
    }

    fn get_mut(&mut self, key: &K) -> Result<Option<&mut Vec<(W, ACC)>>, StateError> {
        let g = self.group(key);
        self.table()?.get_mut(g, key, NOW)
    }

    fn get_or_insert(&mut self, key: &K) -> Result<&mut Vec<(W, ACC)>, StateError> {
        let g = self.group(key);
        let table = self.table()?;
        if table.get_mut(g, key, NOW)?.is_none() {
            table.put(g, key, Vec::new(), NOW)?;
        }
        Ok(table
            .get_mut(g, key, NOW)?
            .expect("the key's value was just written"))
    }

    fn remove(&mut self, key: &K) -> Result<(), StateError> {
        let g = self.group(key);
        self.table()?.take(g, key, NOW).map(drop)
    }

    fn for_each(&mut self, f: &mut WindowVisitor<'_, K, W, ACC>) -> Result<(), StateError> {
        self.table()?.for_each_entry(NOW, &mut |k, ws| {
            f(&k, ws);
            Ok(())
        })
    }
}

/// The panes of aligned windows, each key's as one sorted list in a redb
/// state backend.
pub struct RedbPanes<K, ACC> {
    keys: RedbWindows<K, Timestamp, ACC>,
    /// The keys with an accumulator in each pane, by pane start.
    index: BTreeMap<Timestamp, Vec<K>>,
}

impl<K: StateKey, ACC: StateValue> RedbPanes<K, ACC> {
    /// The panes kept in `backend` as the state `panes`.
    pub fn new(backend: RedbStateBackend<K>) -> Self {
        RedbPanes {
            keys: RedbWindows::named(backend, "panes"),
            index: BTreeMap::new(),
        }
    }
}

impl<K: StateKey, ACC: StateValue> StoreSnapshots for RedbPanes<K, ACC> {
    fn capture(
        &mut self,
        max_parallelism: u32,
        checkpoint: CheckpointId,
        savepoint: bool,
    ) -> Result<WindowCapture, StateError> {
        self.keys.capture(max_parallelism, checkpoint, savepoint)
    }

    fn restore(&mut self, groups: &[KeyGroupBytes]) -> Result<(), StateError> {
        self.keys.restore(groups)?;
        let index = &mut self.index;
        index.clear();
        self.keys.for_each(&mut |k, list| {
            for (p, _) in list {
                index.entry(*p).or_default().push(k.clone());
            }
        })
    }

    fn checkpoint_complete(&mut self, checkpoint: CheckpointId) {
        self.keys.checkpoint_complete(checkpoint);
    }

    fn checkpoint_aborted(&mut self, checkpoint: CheckpointId) {
        self.keys.checkpoint_aborted(checkpoint);
    }

    fn entries(&self) -> usize {
        self.index.values().map(Vec::len).sum()
    }
}

impl<K: StateKey, ACC: StateValue> PaneStore<K, ACC> for RedbPanes<K, ACC> {
    fn add(
        &mut self,
        pane: Timestamp,
        key: &K,
        init: impl Fn() -> ACC,
        add: impl Fn(&mut ACC),
    ) -> Result<bool, StateError> {
        let list = self.keys.get_or_insert(key)?;
        match list.binary_search_by_key(&pane, |(p, _)| *p) {
            Ok(i) => {
                add(&mut list[i].1);
                Ok(false)
            }
            Err(at) => {
                let mut acc = init();
                add(&mut acc);
                list.insert(at, (pane, acc));
                let keys = self.index.entry(pane).or_default();
                keys.push(key.clone());
                Ok(keys.len() == 1)
            }
        }
    }

    fn merged(
        &mut self,
        key: &K,
        from: Timestamp,
        to: Timestamp,
        merge: impl Fn(ACC, ACC) -> ACC,
    ) -> Result<Option<ACC>, StateError> {
        let Some(list) = self.keys.get(key)? else {
            return Ok(None);
        };
        Ok(merge_range(list, from, to, &merge))
    }

    fn for_window<E: From<StateError>>(
        &mut self,
        from: Timestamp,
        to: Timestamp,
        merge: impl Fn(ACC, ACC) -> ACC,
        _retract: impl Fn(&mut ACC, &ACC) -> bool,
        mut emit: impl FnMut(&K, &ACC) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut panes = self.index.range(from..to);
        let (one, more) = (panes.next(), panes.next());
        // A key in several of the window's panes is emitted once.
        let mut seen: FxHashSet<&K> = FxHashSet::default();
        let keys = one.into_iter().chain(more).chain(panes);
        for (_, pane_keys) in keys {
            for k in pane_keys {
                if more.is_some() && !seen.insert(k) {
                    continue;
                }
                let list = self.keys.get(k)?;
                if let Some(acc) = list.and_then(|l| merge_range(l, from, to, &merge)) {
                    emit(k, &acc)?;
                }
            }
        }
        Ok(())
    }

    fn first(&self) -> Option<Timestamp> {
        self.index.first_key_value().map(|(p, _)| *p)
    }

    fn pop_first(&mut self) -> Result<(), StateError> {
        let Some((pane, keys)) = self.index.pop_first() else {
            return Ok(());
        };
        for k in &keys {
            let empty = match self.keys.get_mut(k)? {
                Some(list) => {
                    list.retain(|(p, _)| *p != pane);
                    list.is_empty()
                }
                None => false,
            };
            if empty {
                self.keys.remove(k)?;
            }
        }
        Ok(())
    }
}

/// The accumulators of the panes of `list` starting in `from..to`, merged.
fn merge_range<ACC: Clone>(
    list: &[(Timestamp, ACC)],
    from: Timestamp,
    to: Timestamp,
    merge: &impl Fn(ACC, ACC) -> ACC,
) -> Option<ACC> {
    let lo = list.partition_point(|(p, _)| *p < from);
    let mut merged: Option<ACC> = None;
    for (p, acc) in &list[lo..] {
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

#[cfg(test)]
mod tests {
    //! The redb stores against the heap ones and a `BTreeMap` model, on
    //! random operations, through a snapshot and restore (at another key
    //! group range too).

    use super::super::{HeapPanes, HeapWindows};
    use super::*;
    use proptest::prelude::*;

    type Model = BTreeMap<(u8, Timestamp), i64>;

    #[derive(Clone, Debug)]
    enum Op {
        Add {
            key: u8,
            pane: i64,
            value: i64,
        },
        Merged {
            key: u8,
            from: i64,
            len: i64,
        },
        Fire {
            from: i64,
            len: i64,
        },
        /// Fires the window `step` panes after the last one fired, of its
        /// length (as sliding windows fire: the heap panes move the last
        /// window's merge to it).
        Next {
            step: i64,
        },
        Pop,
        Restore,
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        let op = prop_oneof![
            6 => (0u8..12, 0i64..20, -50i64..50)
                .prop_map(|(key, pane, value)| Op::Add { key, pane, value }),
            2 => (0u8..12, -2i64..20, 0i64..8)
                .prop_map(|(key, from, len)| Op::Merged { key, from, len }),
            2 => (-2i64..20, 0i64..8).prop_map(|(from, len)| Op::Fire { from, len }),
            3 => (0i64..3).prop_map(|step| Op::Next { step }),
            1 => Just(Op::Pop),
            1 => Just(Op::Restore),
        ];
        prop::collection::vec(op, 1..120)
    }

    fn redb(range: std::ops::Range<u32>) -> RedbStateBackend<u8> {
        RedbStateBackend::temp("Window", 16, range)
            .expect("temp database")
            .with_cache_capacity(4)
    }

    /// Restores `from`'s capture into `to` (all key groups).
    fn round_trip<S: StoreSnapshots>(from: &mut S, to: &mut S, n: u64) {
        let capture = from.capture(16, CheckpointId(n), true).expect("captured");
        let groups = (capture.groups)().expect("serialized");
        to.restore(&groups).expect("restored");
    }

    fn fire<S: PaneStore<u8, i64>>(s: &mut S, from: i64, to: i64) -> Vec<(u8, i64)> {
        let mut got = Vec::new();
        s.for_window(
            from,
            to,
            |a, b| a + b,
            |a, b| {
                *a -= b;
                true
            },
            |k, acc| {
                got.push((*k, *acc));
                Ok::<_, StateError>(())
            },
        )
        .expect("fired");
        got.sort();
        got
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Every answer of the redb panes is the model's (and the heap
        /// panes'); the model drops panes below the first on `Pop`.
        #[test]
        fn redb_panes_match_a_btreemap(ops in ops()) {
            let mut model = Model::new();
            let mut heaps = [HeapPanes::<u8, i64>::default()];
            let mut store = RedbPanes::<u8, i64>::new(redb(0..16));
            let mut restores = 0;
            let mut dropped: Option<i64> = None;
            let mut last_fired: Option<(i64, i64)> = None;
            for op in ops {
                match op {
                    Op::Add { key, pane, value } => {
                        // Panes at or below a dropped one are never added
                        // to again (the operator's invariant).
                        if dropped.is_some_and(|d| pane <= d) {
                            continue;
                        }
                        let new_model = !model.keys().any(|&(_, p)| p == pane);
                        *model.entry((key, pane)).or_insert(0) += value;
                        let new = store.add(pane, &key, || 0, |a| *a += value).unwrap();
                        prop_assert_eq!(new, new_model);
                        for h in heaps.iter_mut() {
                            let new_heap = h.add(pane, &key, || 0, |a| *a += value).unwrap();
                            prop_assert_eq!(new_heap, new_model);
                        }
                    }
                    Op::Merged { key, from, len } => {
                        let want = model
                            .range((key, from)..(key, from + len))
                            .map(|(_, v)| *v)
                            .reduce(|a, b| a + b);
                        prop_assert_eq!(store.merged(&key, from, from + len, |a, b| a + b).unwrap(), want);
                        for h in heaps.iter_mut() {
                            prop_assert_eq!(h.merged(&key, from, from + len, |a, b| a + b).unwrap(), want);
                        }
                    }
                    Op::Fire { .. } | Op::Next { .. } => {
                        let (from, len) = match op {
                            Op::Fire { from, len } => (from, len),
                            Op::Next { step } => last_fired.map_or((0, 4), |(f, l)| (f + step, l)),
                            _ => unreachable!(),
                        };
                        last_fired = Some((from, len));
                        let mut want: BTreeMap<u8, i64> = BTreeMap::new();
                        for (&(k, p), v) in &model {
                            if p >= from && p < from + len {
                                *want.entry(k).or_insert(0) += v;
                            }
                        }
                        let want: Vec<(u8, i64)> = want.into_iter().collect();
                        prop_assert_eq!(fire(&mut store, from, from + len), want.clone());
                        for h in heaps.iter_mut() {
                            prop_assert_eq!(fire(h, from, from + len), want.clone());
                        }
                    }
                    Op::Pop => {
                        if let Some(first) = model.keys().map(|&(_, p)| p).min() {
                            model.retain(|&(_, p), _| p != first);
                            dropped = dropped.max(Some(first));
                        }
                        store.pop_first().unwrap();
                        for h in heaps.iter_mut() {
                            h.pop_first().unwrap();
                        }
                    }
                    Op::Restore => {
                        restores += 1;
                        let mut fresh = RedbPanes::<u8, i64>::new(redb(0..16));
                        round_trip(&mut store, &mut fresh, restores);
                        store = fresh;
                        let mut fresh = HeapPanes::<u8, i64>::default();
                        round_trip(&mut heaps[0], &mut fresh, restores);
                        heaps = [fresh];
                    }
                }
                let first = model.keys().map(|&(_, p)| p).min();
                prop_assert_eq!(store.first(), first);
                prop_assert_eq!(store.entries(), model.len());
                for h in &heaps {
                    prop_assert_eq!(h.first(), first);
                    prop_assert_eq!(h.entries(), model.len());
                }
            }
        }
    }

    /// The windows of a redb store survive a snapshot restored into two
    /// stores splitting the key groups (a rescale), and equal the heap
    /// store's; each store refuses the other's bytes with a schema error.
    #[test]
    fn redb_windows_rescale_and_refuse_heap_bytes() {
        let mut heap = HeapWindows::<u8, i64, i64>::default();
        let mut store = RedbWindows::<u8, i64, i64>::new(redb(0..16));
        for k in 0..40u8 {
            for s in [&mut heap as &mut dyn WindowStoreDyn, &mut store] {
                s.push(k, i64::from(k) * 10, i64::from(k));
            }
        }
        store.remove(&3).unwrap();
        heap.remove(&3).unwrap();
        let groups = (store.capture(16, CheckpointId(1), true).unwrap().groups)().unwrap();
        let mut parts = [
            RedbWindows::<u8, i64, i64>::new(redb(0..7)),
            RedbWindows::<u8, i64, i64>::new(redb(7..16)),
        ];
        for (part, range) in parts.iter_mut().zip([0..7u32, 7..16]) {
            let mine: Vec<KeyGroupBytes> = groups
                .iter()
                .filter(|g| range.contains(&g.key_group))
                .cloned()
                .collect();
            part.restore(&mine).unwrap();
        }
        let mut want = Vec::new();
        heap.for_each(&mut |k, ws| want.push((*k, ws.to_vec())))
            .unwrap();
        want.sort();
        let mut got = Vec::new();
        for part in &mut parts {
            part.for_each(&mut |k, ws| got.push((*k, ws.to_vec())))
                .unwrap();
        }
        got.sort();
        assert_eq!(got, want);
        assert_eq!(got.len(), 39);

        let heap_bytes = (heap.capture(16, CheckpointId(1), true).unwrap().groups)().unwrap();
        let mut fresh = RedbWindows::<u8, i64, i64>::new(redb(0..16));
        let err = fresh.restore(&heap_bytes).unwrap_err();
        assert!(matches!(err, StateError::SchemaMismatch { .. }), "{err}");
        let mut fresh = HeapWindows::<u8, i64, i64>::default();
        let err = fresh.restore(&groups).unwrap_err();
        assert!(matches!(err, StateError::SchemaMismatch { .. }), "{err}");
    }

    /// Both stores behind one test body.
    trait WindowStoreDyn {
        fn push(&mut self, key: u8, w: i64, acc: i64);
    }

    impl<S: WindowStore<u8, i64, i64>> WindowStoreDyn for S {
        fn push(&mut self, key: u8, w: i64, acc: i64) {
            self.get_or_insert(&key).unwrap().push((w, acc));
        }
    }
}
