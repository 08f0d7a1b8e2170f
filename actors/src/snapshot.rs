//! What a subtask hands over when it takes part in a checkpoint.
//!
//! 1. **Capture (synchronous).** When a checkpoint's barrier is complete at a
//!    subtask (or the coordinator triggers a source), the actor walks its chain
//!    with [`ChainInput::snapshot`](crate::chain::ChainInput::snapshot): each
//!    stateful operator adds an [`OperatorCapture`] whose `finish` closure
//!    holds cheap references (or already-encoded bytes) to its state.
//! 2. **Write (asynchronous).** The actor moves the captures to a blocking
//!    thread, where every `finish` serializes and a [`BlobWriter`] persists the
//!    bytes as files; processing goes on meanwhile.
//! 3. **Ack.** The thread sends [`AcknowledgeCheckpoint`] with the resulting
//!    [`BlobRef`]s to the coordinator.

use crate::element::{StreamElement, Timestamp};
use crate::error::{Error, Result};
use crate::ids::{CheckpointId, SubtaskIndex, VertexId};
use actix::prelude::*;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

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

/// The serialized state of one operator in one subtask.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OperatorBytes {
    /// Keyed state: a postcard `Vec<KeyGroupBytes>`-shaped blob (opaque
    /// here), or `None` without keyed state.
    pub keyed: Option<Vec<u8>>,
    /// Keyed state of earlier checkpoints this one builds on (incremental
    /// snapshots): restore applies them in order, then `keyed`.
    pub keyed_base: Vec<BlobRef>,
    /// Operator list state redistributed by even split (postcard `Vec<Vec<u8>>`).
    pub split_list: Option<Vec<u8>>,
    /// Operator list state every subtask gets whole (postcard `Vec<Vec<u8>>`).
    pub union_list: Option<Vec<u8>>,
}

/// The asynchronous part of one operator's snapshot.
pub type FinishCapture = Box<dyn FnOnce() -> Result<OperatorBytes> + Send>;

/// Told the keyed-state blobs of an operator's snapshot once they are
/// written (its `keyed_base` first, then the new one), before the ack.
pub type PersistedHook = Box<dyn FnOnce(&[BlobRef]) + Send>;

/// One operator's synchronous capture.
pub struct OperatorCapture {
    /// The operator's stable uid.
    pub uid: String,
    /// Serializes the captured state (runs off the actor's thread).
    pub finish: FinishCapture,
    /// Called with the keyed blobs once written (incremental snapshots).
    pub persisted: Option<PersistedHook>,
}

/// Everything a chain captured for one checkpoint.
#[derive(Default)]
pub struct ChainSnapshot {
    /// Per stateful operator.
    pub operators: Vec<OperatorCapture>,
    /// Unaligned checkpoints: output batches the barrier overtook, already
    /// encoded: `(writer, output channel, element bytes)` in queue order.
    pub output_channel_state: Vec<(u32, u32, Vec<u8>)>,
}

/// The persisted state of one operator in one subtask.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OperatorHandles {
    /// The operator's uid.
    pub uid: String,
    /// Keyed state blobs, oldest first (see [`OperatorBytes::keyed_base`]).
    pub keyed: Vec<BlobRef>,
    /// Even-split list state.
    pub split_list: Option<BlobRef>,
    /// Union list state.
    pub union_list: Option<BlobRef>,
}

/// Encodes and decodes stream elements of one type: in-flight data of
/// unaligned checkpoints.
pub trait ElementCodec<T>: Send + Sync + 'static {
    /// The bytes of `element`.
    fn encode(&self, element: &StreamElement<T>) -> Result<Vec<u8>>;
    /// The element `bytes` encode.
    fn decode(&self, bytes: &[u8]) -> Result<StreamElement<T>>;
}

/// An [`ElementCodec`] for serde types, with postcard.
pub struct SerdeCodec;

impl<T: Serialize + serde::de::DeserializeOwned> ElementCodec<T> for SerdeCodec {
    fn encode(&self, element: &StreamElement<T>) -> Result<Vec<u8>> {
        postcard::to_allocvec(element)
            .map_err(|e| Error::Runtime(format!("cannot encode channel state: {e}")))
    }
    fn decode(&self, bytes: &[u8]) -> Result<StreamElement<T>> {
        postcard::from_bytes(bytes)
            .map_err(|e| Error::Runtime(format!("cannot decode channel state: {e}")))
    }
}

/// Persists state bytes; supplied by the layer that owns the checkpoint store.
pub trait BlobWriter: Send + Sync {
    /// Writes `bytes` as blob `name` of checkpoint `checkpoint`.
    fn put(&self, checkpoint: CheckpointId, name: &str, bytes: &[u8]) -> Result<BlobRef>;
}

/// Sent by the coordinator to a subtask without live inputs (a source, or a
/// subtask whose inputs all ended): take checkpoint `barrier` now and emit
/// the barrier downstream.
#[derive(Message, Clone, Copy, Debug)]
#[rtype(result = "()")]
pub struct TriggerCheckpoint {
    /// The barrier to inject.
    pub barrier: crate::element::Barrier,
    /// The job stops with this checkpoint: a source emits nothing after
    /// its barrier (it finishes on the checkpoint's notify-complete, and
    /// goes on if the checkpoint is aborted).
    pub stop: bool,
}

/// Sent by the coordinator to every subtask once checkpoint `checkpoint`
/// completed (`completed`) or was aborted.
#[derive(Message, Clone, Copy, Debug)]
#[rtype(result = "()")]
pub struct NotifyCheckpoint {
    /// The checkpoint.
    pub checkpoint: CheckpointId,
    /// Completed (true) or aborted (false).
    pub completed: bool,
    /// The job stops with this checkpoint (stop with a final checkpoint or
    /// savepoint): once its chain was notified (sinks committed), the
    /// subtask finishes, wherever its input is.
    pub finish: bool,
}

/// A subtask's part of a checkpoint, persisted.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct AcknowledgeCheckpoint {
    /// The checkpoint.
    pub checkpoint: CheckpointId,
    /// The vertex of the subtask.
    pub vertex: VertexId,
    /// The subtask.
    pub subtask: SubtaskIndex,
    /// Per stateful operator of the chain.
    pub operators: Vec<OperatorHandles>,
    /// The subtask's combined input watermark at the cut.
    pub watermark: Timestamp,
    /// Per input channel watermarks at the cut.
    pub channel_watermarks: Vec<Timestamp>,
    /// Unaligned: input elements that crossed the cut.
    pub input_channel_state: Option<BlobRef>,
    /// Unaligned: output batches the barrier overtook.
    pub output_channel_state: Option<BlobRef>,
    /// Bytes of channel state.
    pub channel_state_bytes: u64,
    /// Bytes of operator state written.
    pub state_bytes: u64,
    /// First barrier to snapshot, in ms (0 for sources).
    pub alignment_ms: u64,
    /// The synchronous part, in ms.
    pub sync_ms: u64,
    /// The asynchronous part, in ms.
    pub async_ms: u64,
    /// Whether the subtask took it unaligned.
    pub unaligned: bool,
}

/// A subtask could not take part in a checkpoint.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct DeclineCheckpoint {
    /// The checkpoint.
    pub checkpoint: CheckpointId,
    /// The vertex of the subtask.
    pub vertex: VertexId,
    /// The subtask.
    pub subtask: SubtaskIndex,
    /// Why.
    pub reason: String,
}

/// Where a subtask sends its checkpoint messages, and how it persists state.
#[derive(Clone)]
pub struct CheckpointLink {
    /// Acks go here.
    pub ack: Recipient<AcknowledgeCheckpoint>,
    /// Declines go here.
    pub decline: Recipient<DeclineCheckpoint>,
    /// Persists captured bytes.
    pub writer: Arc<dyn BlobWriter>,
    /// Aligned checkpoints waiting longer than this for their barriers
    /// continue unaligned (on subtasks that can encode their input).
    pub alignment_timeout: Option<std::time::Duration>,
    /// Where a subtask reports that it reached its end, when the job ends
    /// with a final checkpoint (periodic checkpoints on): the subtask then
    /// stays, takes part in checkpoints triggered directly, and finishes
    /// only once a checkpoint it took after its end completed, so what its
    /// operators commit on completion is committed exactly then, never
    /// before a checkpoint covers it. `None`: it finishes at its end.
    pub final_checkpoint: Option<Recipient<crate::messages::SubtaskEnded>>,
}
