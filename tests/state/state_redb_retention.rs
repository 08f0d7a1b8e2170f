//! Checkpoint retention with incremental keyed state: the blobs of earlier
//! checkpoints that a retained checkpoint builds on survive, everything else
//! goes.
//!
//! A redb backend's snapshots (full and deltas) are written to a checkpoint
//! store as the runtime writes them — each checkpoint's keyed chain is its
//! base's blobs, then its own — and committed keeping only the newest
//! checkpoint. After each commit the `chk-<id>` directories on disk are
//! exactly those the retained checkpoint's blobs live in (computed from its
//! metadata), and restoring it from the store equals a `HashMap` oracle of
//! the state at that checkpoint.

use crate::cli_common;
use cli_common::SplitMix;
use floe::checkpoint::{
    BlobRef, CHECKPOINT_FORMAT_VERSION, CheckpointId, CheckpointMetadata, CheckpointStore,
    OperatorState, SnapshotKind, SubtaskOperatorState, load_latest,
};
use floe::state::ValueStateDescriptor;
use floe::state::{HeapStateBackend, KeyGroupBytes, KeyScope, RedbStateBackend, StateBackend};
use std::collections::{BTreeSet, HashMap};
use std::path::Path;

const MAXP: u32 = 128;
const KEYS: u64 = 3_000;

fn metadata(id: u64, keyed: Vec<BlobRef>) -> CheckpointMetadata {
    CheckpointMetadata {
        version: CHECKPOINT_FORMAT_VERSION,
        id: CheckpointId(id),
        kind: SnapshotKind::Checkpoint,
        trigger_ms: 1_700_000_000_000 + id as i64,
        duration_ms: 1,
        alignment_ms: 0,
        sync_ms: 0,
        async_ms: 0,
        state_bytes: keyed.last().map_or(0, |b| b.len),
        channel_state_bytes: 0,
        unaligned: false,
        max_parallelism: MAXP,
        operators: vec![OperatorState {
            uid: "count".into(),
            name: "Keyed Process".into(),
            parallelism: 1,
            subtasks: vec![SubtaskOperatorState {
                subtask: 0,
                keyed,
                ..Default::default()
            }],
        }],
        runtime: Vec::new(),
        transactional_sinks: Vec::new(),
    }
}

fn chk_dirs(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("chk-"))
        .collect()
}

#[test]
fn retention_keeps_the_bases_of_retained_checkpoints_and_nothing_else() {
    let tmp = tempfile::tempdir().unwrap();
    let store = CheckpointStore::open(tmp.path()).unwrap();
    let desc = ValueStateDescriptor::<u64>::new("v");
    let mut b = RedbStateBackend::<String>::temp("op", MAXP, 0..MAXP).unwrap();
    let mut oracle: HashMap<String, u64> = HashMap::new();
    let mut r = SplitMix(9);
    let mut chains: HashMap<u64, Vec<BlobRef>> = HashMap::new();
    let mut incremental = 0;
    for id in 1..=24u64 {
        for _ in 0..100 {
            let k = format!("k{}", r.below(KEYS));
            let mut s = KeyScope::new(&mut b, &k).value_state(&desc).unwrap();
            if r.below(5) == 0 {
                s.clear().unwrap();
                oracle.remove(&k);
            } else {
                let v = r.next();
                s.update(v).unwrap();
                oracle.insert(k, v);
            }
        }
        let snapshot = b.snapshot_for(CheckpointId(id), false);
        let base = snapshot.base();
        let groups = snapshot.serialize().unwrap();
        let bytes = postcard::to_allocvec(&groups).unwrap();
        let own = store
            .write_blob(CheckpointId(id), "count/0/keyed", &bytes)
            .unwrap();
        let mut chain = match base {
            Some(base) => {
                incremental += 1;
                chains[&base].clone()
            }
            None => Vec::new(),
        };
        chain.push(own);
        store.commit(&metadata(id, chain.clone()), 1).unwrap();
        b.notify_checkpoint_complete(CheckpointId(id));
        chains.insert(id, chain.clone());

        // On disk: the directories of the retained checkpoint's blobs.
        let want: BTreeSet<String> = chain
            .iter()
            .map(|blob| blob.path.split('/').next().unwrap().to_string())
            .chain([format!("chk-{id}")])
            .collect();
        assert_eq!(chk_dirs(tmp.path()), want, "after committing {id}");

        // And it restores to the oracle.
        let loaded = load_latest(&store).unwrap();
        assert_eq!(loaded.meta.id, CheckpointId(id));
        let mut all: Vec<KeyGroupBytes> = Vec::new();
        for blob in &loaded.meta.operators[0].subtasks[0].keyed {
            let bytes = loaded.read_blob(blob).unwrap();
            let groups: Vec<KeyGroupBytes> = postcard::from_bytes(&bytes).unwrap();
            all.extend(groups);
        }
        let mut heap = HeapStateBackend::<String>::new("op", MAXP, 0..MAXP);
        heap.restore(&all).unwrap();
        for i in 0..KEYS {
            let k = format!("k{i}");
            let got = KeyScope::new(&mut heap, &k)
                .value_state(&desc)
                .unwrap()
                .value()
                .unwrap();
            assert_eq!(got, oracle.get(&k).copied(), "checkpoint {id}: {k}");
        }
        assert_eq!(heap.entries("v"), oracle.len(), "checkpoint {id}");
    }
    assert!(incremental >= 12, "{incremental} incremental checkpoints");
}
