//! Incremental snapshots of the redb backend, checked against `HashMap`
//! oracles of the state at each snapshot.
//!
//! - A chain of snapshots over random puts and removals, some checkpoints
//!   completed, some aborted, some never heard of again: restoring any
//!   completed one (its base's bytes, then its own, as the checkpoint's
//!   keyed blobs are applied) equals the oracle of that moment — into a
//!   redb backend, into the heap backend, and split over two subtasks of
//!   another key-group range. Deltas are smaller than full snapshots, and
//!   chains stay bounded.
//! - Changing 1% of 100,000 keys gives a delta of at most 5% of the full
//!   snapshot.

use crate::cli_common;
use crate::state_oracle;
use cli_common::SplitMix;
use floe::checkpoint::CheckpointId;
use floe::state::{
    HeapStateBackend, KeyGroupBytes, KeyScope, MAX_DELTAS, RedbStateBackend, StateBackend,
    ValueStateDescriptor,
};
use state_oracle::{MAXP, Oracle, check, only};
use std::collections::{BTreeMap, HashMap};

fn size(groups: &[KeyGroupBytes]) -> usize {
    groups.iter().map(|g| g.bytes.len()).sum()
}

#[test]
fn chains_of_deltas_restore_to_the_oracle_of_their_checkpoint() {
    const KEYS: u64 = 4_000;
    let desc = ValueStateDescriptor::<u64>::new("v");
    let mut b = RedbStateBackend::<String>::temp("op", MAXP, 0..MAXP)
        .unwrap()
        .with_cache_capacity(256);
    let mut oracle = Oracle::new();
    let mut r = SplitMix(42);
    // Per checkpoint written: its chain of key-group bytes (the base's
    // first) and the oracle when it was taken.
    let mut written: BTreeMap<u64, (Vec<Vec<KeyGroupBytes>>, Oracle)> = BTreeMap::new();
    let mut completed: Option<u64> = None;
    let mut restored = 0;
    let mut deltas = 0;
    for checkpoint in 1..=40u64 {
        // A few hundred changes between snapshots, a burst now and then.
        let changes = if checkpoint % 13 == 0 { 3_000 } else { 150 };
        for _ in 0..changes {
            let k = format!("k{}", r.below(KEYS));
            let mut s = KeyScope::new(&mut b, &k).value_state(&desc).unwrap();
            if r.below(4) == 0 {
                s.clear().unwrap();
                oracle.remove(&k);
            } else {
                let v = r.next();
                s.update(v).unwrap();
                oracle.insert(k, v);
            }
        }
        let snapshot = b.snapshot_for(CheckpointId(checkpoint), false);
        let base = snapshot.base();
        let bytes = snapshot.serialize().unwrap();
        let chain = match base {
            None => vec![bytes],
            Some(base) => {
                deltas += 1;
                assert_eq!(
                    Some(base),
                    completed,
                    "a delta builds on the last completed"
                );
                let (base_chain, _) = &written[&base];
                let full = size(&base_chain[0]);
                assert!(
                    size(&bytes) < full,
                    "checkpoint {checkpoint}: delta of {} bytes, full {full}",
                    size(&bytes)
                );
                let mut chain = base_chain.clone();
                chain.push(bytes);
                chain
            }
        };
        assert!(chain.len() <= MAX_DELTAS + 1, "chain of {}", chain.len());
        written.insert(checkpoint, (chain, oracle.clone()));
        // Complete about half, abort some, leave the rest pending forever.
        match r.below(5) {
            0..=2 => {
                b.notify_checkpoint_complete(CheckpointId(checkpoint));
                completed = Some(checkpoint);
            }
            3 => {} // aborted: never reported
            _ => {} // pending: its completion never arrives
        }
        let Some(c) = completed.filter(|&c| c == checkpoint) else {
            continue;
        };
        restored += 1;
        let (chain, at) = &written[&c];
        let all: Vec<KeyGroupBytes> = chain.iter().flatten().cloned().collect();
        let what = format!("checkpoint {c} ({} blobs)", chain.len());
        let mut redb = RedbStateBackend::<String>::temp("op", MAXP, 0..MAXP).unwrap();
        redb.restore(&all).unwrap();
        check(&mut redb, at, KEYS, &format!("{what} into redb"));
        let mut heap = HeapStateBackend::<String>::new("op", MAXP, 0..MAXP);
        heap.restore(&all).unwrap();
        check(&mut heap, at, KEYS, &format!("{what} into heap"));
        for range in [0..50, 50..MAXP] {
            let mut part = HeapStateBackend::<String>::new("op", MAXP, range.clone());
            part.restore(&only(&all, &range)).unwrap();
            check(&mut part, at, KEYS, &format!("{what} into {range:?}"));
        }
        // Restored and snapshotted before the state is used again: the
        // restored changes travel on, unregistered.
        let mut untouched = RedbStateBackend::<String>::temp("op", MAXP, 0..MAXP).unwrap();
        untouched.restore(&all).unwrap();
        let bytes = untouched
            .snapshot_for(CheckpointId(1), false)
            .serialize()
            .unwrap();
        let mut copy = HeapStateBackend::<String>::new("op", MAXP, 0..MAXP);
        copy.restore(&bytes).unwrap();
        check(&mut copy, at, KEYS, &format!("{what} carried unregistered"));
        // A restored backend snapshots in full and chains on from there.
        let again = redb.snapshot_for(CheckpointId(1), false);
        assert_eq!(again.base(), None, "{what}: first snapshot after a restore");
        let mut copy = HeapStateBackend::<String>::new("op", MAXP, 0..MAXP);
        copy.restore(&again.serialize().unwrap()).unwrap();
        check(&mut copy, at, KEYS, &format!("{what} re-snapshotted"));
    }
    assert!(restored >= 10, "{restored} checkpoints restored");
    assert!(deltas >= 10, "{deltas} incremental snapshots");
}

#[test]
fn a_delta_after_changing_one_percent_is_at_most_five_percent_of_full() {
    const KEYS: u64 = 100_000;
    let desc = ValueStateDescriptor::<u64>::new("v");
    let mut b = RedbStateBackend::<u64>::temp("op", MAXP, 0..MAXP).unwrap();
    for k in 0..KEYS {
        KeyScope::new(&mut b, &k)
            .value_state(&desc)
            .unwrap()
            .update(k)
            .unwrap();
    }
    let full = b.snapshot_for(CheckpointId(1), false);
    assert_eq!(full.base(), None);
    let full = full.serialize().unwrap();
    b.notify_checkpoint_complete(CheckpointId(1));
    let mut r = SplitMix(5);
    let mut oracle: HashMap<u64, u64> = (0..KEYS).map(|k| (k, k)).collect();
    for _ in 0..KEYS / 100 {
        let k = r.below(KEYS);
        KeyScope::new(&mut b, &k)
            .value_state(&desc)
            .unwrap()
            .update(k + 1)
            .unwrap();
        oracle.insert(k, k + 1);
    }
    let delta = b.snapshot_for(CheckpointId(2), false);
    assert_eq!(delta.base(), Some(1));
    let delta = delta.serialize().unwrap();
    let (f, d) = (size(&full), size(&delta));
    assert!(d * 20 <= f, "delta {d} bytes, full {f} bytes");
    let mut heap = HeapStateBackend::<u64>::new("op", MAXP, 0..MAXP);
    heap.restore(&[full, delta].concat()).unwrap();
    for (k, v) in &oracle {
        let got = KeyScope::new(&mut heap, k)
            .value_state(&desc)
            .unwrap()
            .value()
            .unwrap();
        assert_eq!(got, Some(*v), "key {k}");
    }
    assert_eq!(heap.entries("v"), oracle.len());
}
