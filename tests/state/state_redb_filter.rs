//! The redb backend's key filter (a Bloom filter that lets a cache miss on a
//! key the database never held skip the B-tree lookup) must never hide a
//! row: every way a row reaches the database — flushes of the cache,
//! restoring a full snapshot, applying an incremental one, restoring into
//! another key-group range — has to enter it, and the rebuilds as the state
//! grows past the filter's size have to keep every row.
//!
//! Read-modify-write counts (like `floe run wordcount --state redb`) over
//! 5,000 keys with a 16-entry cache, checked against a `HashMap` oracle:
//! before a checkpoint, after restoring its chain (full + delta) into a new
//! backend and into two backends of half the key groups each, and after
//! going on counting on the restored backends.

use crate::cli_common;
use crate::state_oracle;
use cli_common::SplitMix;
use floe::checkpoint::CheckpointId;
use floe::state::{KeyGroupBytes, KeyScope, RedbStateBackend, StateBackend, ValueStateDescriptor};
use floe_actors::keygroup::key_group;
use state_oracle::{MAXP, Oracle, check, only};

const KEYS: u64 = 5_000;

fn backend(range: std::ops::Range<u32>) -> RedbStateBackend<String> {
    RedbStateBackend::<String>::temp("op", MAXP, range)
        .unwrap()
        .with_cache_capacity(16)
}

/// One step: clear a random key, or add to its count (read, then write).
fn step(r: &mut SplitMix, oracle: &mut Oracle, backends: &mut [RedbStateBackend<String>]) {
    let desc = ValueStateDescriptor::<u64>::new("v");
    let k = format!("k{}", r.below(KEYS));
    let clear = r.below(6) == 0;
    let add = r.below(100) + 1;
    let kg = key_group(&k, MAXP);
    let b = backends
        .iter_mut()
        .find(|b| b.key_group_range().contains(&kg))
        .expect("a backend owns every key group");
    let mut s = KeyScope::new(b, &k).value_state(&desc).unwrap();
    if clear {
        s.clear().unwrap();
        oracle.remove(&k);
    } else {
        let v = s.value().unwrap().unwrap_or(0) + add;
        s.update(v).unwrap();
        *oracle.entry(k).or_default() += add;
    }
}

#[test]
fn rows_from_flushes_restores_deltas_and_rescaling_stay_visible() {
    let mut r = SplitMix(7);
    let mut oracle = Oracle::new();
    let mut first = [backend(0..MAXP)];
    for _ in 0..12_000 {
        step(&mut r, &mut oracle, &mut first);
    }
    check(&mut first[0], &oracle, KEYS, "before any checkpoint");
    let full = first[0].snapshot_for(CheckpointId(1), false);
    assert_eq!(full.base(), None);
    let full = full.serialize().unwrap();
    first[0].notify_checkpoint_complete(CheckpointId(1));
    // Few enough changes for a delta (at most half the keys held).
    for _ in 0..300 {
        step(&mut r, &mut oracle, &mut first);
    }
    let delta = first[0].snapshot_for(CheckpointId(2), false);
    assert_eq!(delta.base(), Some(1), "the second snapshot is a delta");
    let delta = delta.serialize().unwrap();
    let chain: Vec<KeyGroupBytes> = full.into_iter().chain(delta).collect();

    // The same parallelism, and rescaled to two subtasks.
    let mut same = [backend(0..MAXP)];
    same[0].restore(&chain).unwrap();
    check(&mut same[0], &oracle, KEYS, "restored");
    let (lo, hi) = (0..MAXP / 2, MAXP / 2..MAXP);
    let mut split = [backend(lo.clone()), backend(hi.clone())];
    split[0].restore(&only(&chain, &lo)).unwrap();
    split[1].restore(&only(&chain, &hi)).unwrap();
    for b in &mut split {
        check(b, &oracle, KEYS, "rescaled");
    }

    // Counting on after the restore adds to the restored counts.
    let mut oracle_split = oracle.clone();
    let mut r_split = SplitMix(11);
    let mut r_same = SplitMix(11);
    for _ in 0..10_000 {
        step(&mut r_same, &mut oracle, &mut same);
        step(&mut r_split, &mut oracle_split, &mut split);
    }
    check(&mut same[0], &oracle, KEYS, "after counting on");
    for b in &mut split {
        check(b, &oracle_split, KEYS, "rescaled, after counting on");
    }
}
