//! The refusal of channel state on a rescaled edge, on checkpoints built
//! by hand: a source at parallelism 1 feeding a keyed operator by hash.
//!
//! The bug: only a rescaled vertex's own channel state was refused, so a
//! checkpoint whose channel state sat only on the source's output channels
//! (the source keeping its parallelism) restored with the keyed operator at
//! another parallelism, and the source's queued records were sent on the
//! channels of the old key-group ranges: windows fired twice with partial
//! sums. Each case here is checked against what the edge allows: refused
//! when an end of an edge with channel state changes parallelism, restored
//! (with the channel state handed back) otherwise.

use super::*;
use crate::plan::{EdgeShape, NodeShape, PlanOptions, Port};
use floe_actors::checkpoint::format::{
    BlobRef, CHECKPOINT_FORMAT_VERSION, CheckpointMetadata, SnapshotKind, SubtaskRuntimeState,
};
use floe_actors::partitioner::PartitionKind;

const MAX_PARALLELISM: u32 = 128;

/// Source (parallelism `source`) -> hash -> Window (parallelism `window`).
fn plan(source: usize, window: usize) -> Plan {
    let node = |name: &str, parallelism, inputs: Vec<EdgeShape>| NodeShape {
        name: name.into(),
        uid: None,
        parallelism,
        chainable: true,
        head: false,
        suspends: false,
        source: inputs.is_empty(),
        transactional: false,
        inputs,
    };
    let edge = EdgeShape {
        from: 0,
        port: Port::Main,
        kind: PartitionKind::Hash,
        explicit: true,
        can_rebalance: false,
    };
    Plan::new(
        vec![
            node("Source", source, vec![]),
            node("Window", window, vec![edge]),
        ],
        PlanOptions {
            chaining: true,
            max_parallelism: MAX_PARALLELISM,
        },
    )
    .expect("a valid plan")
}

/// Where channel state sits in the checkpoint.
#[derive(Clone, Copy, Debug)]
enum InFlight {
    Nowhere,
    SourceOutput,
    WindowInput,
}

/// A checkpoint of `plan(source, window)` with one channel state blob
/// where `at` says, written into `dir`.
fn checkpoint(dir: &std::path::Path, source: u32, window: u32, at: InFlight) -> LoadedSnapshot {
    let old = plan(source as usize, window as usize);
    let blob = |name: &str, bytes: Vec<u8>| {
        std::fs::write(dir.join(name), &bytes).expect("write a blob");
        BlobRef {
            path: name.into(),
            len: bytes.len() as u64,
            checksum: crc32fast::hash(&bytes),
        }
    };
    let mut runtime = Vec::new();
    for (vertex, parallelism) in [(0, source), (1, window)] {
        for subtask in 0..parallelism {
            let mut r = SubtaskRuntimeState {
                head_uid: old.uid(old.heads[vertex]),
                subtask,
                parallelism,
                ..Default::default()
            };
            match (at, vertex) {
                (InFlight::SourceOutput, 0) => {
                    let elements: Vec<(u32, u32, Vec<u8>)> = vec![(0, window - 1, vec![7; 4])];
                    r.output_channel_state = Some(blob(
                        &format!("s{subtask}-output"),
                        postcard::to_allocvec(&elements).expect("encodes"),
                    ));
                }
                (InFlight::WindowInput, 1) => {
                    let elements: Vec<(u32, Vec<u8>)> = vec![(0, vec![7; 4])];
                    r.input_channel_state = Some(blob(
                        &format!("w{subtask}-input"),
                        postcard::to_allocvec(&elements).expect("encodes"),
                    ));
                }
                _ => {}
            }
            runtime.push(r);
        }
    }
    LoadedSnapshot {
        meta: CheckpointMetadata {
            version: CHECKPOINT_FORMAT_VERSION,
            id: CheckpointId(3),
            kind: SnapshotKind::Checkpoint,
            trigger_ms: 0,
            duration_ms: 0,
            alignment_ms: 0,
            sync_ms: 0,
            async_ms: 0,
            state_bytes: 0,
            channel_state_bytes: 0,
            unaligned: !matches!(at, InFlight::Nowhere),
            max_parallelism: MAX_PARALLELISM,
            operators: Vec::new(),
            runtime,
            transactional_sinks: Vec::new(),
        },
        root: dir.to_path_buf(),
        source: dir.to_path_buf(),
        skipped: Vec::new(),
        blobs: None,
    }
}

/// Every combination of where channel state sits and which end of the
/// edge changes parallelism: refused exactly when there is channel state
/// and an end changes, with one line saying what to restore instead.
#[test]
fn channel_state_on_a_rescaled_edge_is_refused_at_either_end() {
    let dir = tempfile::tempdir().expect("temp dir");
    for at in [
        InFlight::Nowhere,
        InFlight::SourceOutput,
        InFlight::WindowInput,
    ] {
        for (old, new) in [((1, 2), (1, 2)), ((1, 2), (1, 3)), ((1, 2), (2, 2))] {
            let loaded = checkpoint(dir.path(), old.0, old.1, at);
            let result = RestorePlan::build(&loaded, &plan(new.0, new.1), MAX_PARALLELISM);
            let what = format!("channel state {at:?}, parallelism {old:?} -> {new:?}");
            let refused =
                !matches!(at, InFlight::Nowhere) && (old.0 as usize, old.1 as usize) != new;
            match result {
                Ok(_) if refused => panic!("{what}: restored"),
                Ok(restored) => {
                    if let (InFlight::SourceOutput, (1, _)) = (at, new) {
                        let source = restored.runtime(0, 0).expect("the source restores");
                        assert_eq!(source.output_channel_state.len(), 1, "{what}");
                    }
                }
                Err(e) if refused => {
                    let line = e.to_string();
                    assert!(!line.contains('\n'), "{what}: {line}");
                    assert!(
                        line.contains("'Source' -> 'Window'")
                            && line.contains("restore a savepoint or an aligned checkpoint"),
                        "{what}: {line}"
                    );
                }
                Err(e) => panic!("{what}: refused: {e}"),
            }
        }
    }
}
