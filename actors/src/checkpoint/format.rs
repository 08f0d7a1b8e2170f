//! The on-disk data model of checkpoints and savepoints.
//!
//! A completed checkpoint is described by one [`CheckpointMetadata`]: per
//! operator (matched by its stable uid) and subtask, references to the blobs
//! holding its state, plus per subtask of each vertex the watermarks and the
//! in-flight channel state of unaligned checkpoints. Blobs are files; each
//! [`BlobRef`] carries the file's length and CRC-32 so that a truncated or
//! corrupted file is refused before it is decoded.

use crate::ids::CheckpointId;
use serde::{Deserialize, Serialize};

/// Version of the checkpoint and savepoint format; a reader refuses others.
pub const CHECKPOINT_FORMAT_VERSION: u32 = 1;

/// Whether a snapshot is a periodic checkpoint or a user-triggered savepoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SnapshotKind {
    /// Periodic, owned by the job, may share blobs with earlier checkpoints.
    Checkpoint,
    /// User-triggered, self-contained: every blob lives in its own directory.
    Savepoint,
}

/// A reference to one persisted state file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobRef {
    /// Path relative to the directory of the store (checkpoints) or of the
    /// savepoint, with `/` separators.
    pub path: String,
    /// Length in bytes.
    pub len: u64,
    /// CRC-32 (IEEE, as `crc32fast` computes it) of the bytes.
    pub checksum: u32,
}

/// The state of one operator in one subtask.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubtaskOperatorState {
    /// The subtask index at the time of the snapshot.
    pub subtask: u32,
    /// Keyed state: a chain of blobs, each a postcard `Vec<KeyGroupBytes>`;
    /// the first is complete, later ones (incremental) replace the key groups
    /// or entries they name. Empty when the operator has no keyed state.
    pub keyed: Vec<BlobRef>,
    /// Operator list state redistributed by even split: a postcard
    /// `Vec<Vec<u8>>`, one element per list entry.
    pub split_list: Option<BlobRef>,
    /// Operator list state every subtask gets whole on restore (union).
    pub union_list: Option<BlobRef>,
}

/// The state of one operator: its subtasks at snapshot time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorState {
    /// The operator's stable id (`.uid(..)`, or one derived from its name and
    /// position in the graph).
    pub uid: String,
    /// The operator's name, for listings.
    pub name: String,
    /// Its parallelism when snapshotted.
    pub parallelism: u32,
    /// One entry per subtask that has state.
    pub subtasks: Vec<SubtaskOperatorState>,
}

/// What a subtask of a vertex (a chain) snapshots beyond its operators' state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubtaskRuntimeState {
    /// Uid of the vertex's head operator.
    pub head_uid: String,
    /// The subtask index.
    pub subtask: u32,
    /// The vertex parallelism when snapshotted.
    pub parallelism: u32,
    /// The subtask's current (combined) input watermark.
    pub watermark: i64,
    /// Per input channel watermark, in channel order.
    pub channel_watermarks: Vec<i64>,
    /// Unaligned checkpoints: the input elements that crossed the cut, a
    /// postcard `Vec<(u32 channel, Vec<u8> element)>` in arrival order.
    pub input_channel_state: Option<BlobRef>,
    /// Unaligned checkpoints: the output batches overtaken by the barrier, a
    /// postcard `Vec<(u32 writer, u32 output, Vec<u8> element)>` in order.
    pub output_channel_state: Option<BlobRef>,
    /// The subtask had finished before the checkpoint: it is restored
    /// finished (a source reads nothing more).
    pub finished: bool,
}

/// One completed checkpoint or savepoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointMetadata {
    /// [`CHECKPOINT_FORMAT_VERSION`] of the writer.
    pub version: u32,
    /// The checkpoint id: increasing within a job (and across its restores,
    /// which continue after the restored id). Encoded as its number.
    pub id: CheckpointId,
    /// Checkpoint or savepoint.
    pub kind: SnapshotKind,
    /// When it was triggered (ms since the epoch).
    pub trigger_ms: i64,
    /// Trigger to completion, in ms.
    pub duration_ms: u64,
    /// Longest barrier alignment of any subtask, in ms.
    pub alignment_ms: u64,
    /// Longest synchronous part of any subtask, in ms.
    pub sync_ms: u64,
    /// Longest asynchronous part of any subtask, in ms.
    pub async_ms: u64,
    /// Bytes of operator state written for this checkpoint.
    pub state_bytes: u64,
    /// Bytes of channel state (unaligned checkpoints).
    pub channel_state_bytes: u64,
    /// Whether any subtask took it unaligned.
    pub unaligned: bool,
    /// The job's max parallelism (number of key groups).
    pub max_parallelism: u32,
    /// Per operator state.
    pub operators: Vec<OperatorState>,
    /// Per vertex subtask watermarks and channel state.
    pub runtime: Vec<SubtaskRuntimeState>,
    /// Uids of the two-phase-commit sinks that commit when this checkpoint
    /// completes: falling back past it to an older checkpoint could
    /// duplicate their committed output.
    pub transactional_sinks: Vec<String>,
}

impl CheckpointMetadata {
    /// Every blob this checkpoint needs, in a stable order.
    pub fn blobs(&self) -> Vec<&BlobRef> {
        let mut out = Vec::new();
        for op in &self.operators {
            for s in &op.subtasks {
                out.extend(s.keyed.iter());
                out.extend(s.split_list.iter());
                out.extend(s.union_list.iter());
            }
        }
        for r in &self.runtime {
            out.extend(r.input_channel_state.iter());
            out.extend(r.output_channel_state.iter());
        }
        out
    }

    /// The total size of its blobs.
    pub fn size_bytes(&self) -> u64 {
        self.blobs().iter().map(|b| b.len).sum()
    }
}
