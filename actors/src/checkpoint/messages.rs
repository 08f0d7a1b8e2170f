//! The messages of the checkpoint protocol.
//!
//! Coordinator → subtask: [`TriggerCheckpoint`] (a subtask without live
//! inputs injects the barrier), [`NotifyCheckpoint`] (complete or abort).
//! Subtask → coordinator: [`AcknowledgeCheckpoint`], [`DeclineCheckpoint`],
//! and [`SubtaskEnded`](crate::messages::SubtaskEnded) /
//! [`SubtaskFinished`](crate::messages::SubtaskFinished). The job's runtime
//! → coordinator: [`RegisterSubtasks`], [`ReplaceSubtasks`],
//! [`RequestSavepoint`], [`TriggerSavepoint`], [`StopWithCheckpoint`],
//! [`StopCoordinator`]. [`CheckpointLink`] is what a subtask is given to
//! take part.

use super::capture::OperatorHandles;
use super::format::BlobRef;
use super::storage::BlobSink;
use crate::element::Timestamp;
use crate::ids::{CheckpointId, SubtaskIndex, VertexId};
use crate::supervisor::FailJob;
use actix::prelude::*;
use std::path::PathBuf;
use std::sync::Arc;

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
    pub writer: Arc<dyn BlobSink>,
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

/// One deployed subtask, as the coordinator addresses it.
#[derive(Clone)]
pub struct SubtaskInfo {
    /// Its vertex.
    pub vertex: VertexId,
    /// Its index.
    pub subtask: SubtaskIndex,
    /// A source: the coordinator triggers it.
    pub is_source: bool,
    /// Uid of its chain's head operator.
    pub head_uid: String,
    /// Its vertex's parallelism.
    pub parallelism: u32,
    /// Where triggers go.
    pub trigger: Recipient<TriggerCheckpoint>,
    /// Where notifications go.
    pub notify: Recipient<NotifyCheckpoint>,
}

/// Hands the coordinator the deployed subtasks and the supervisor.
#[derive(Message)]
#[rtype(result = "()")]
pub struct RegisterSubtasks {
    /// Every subtask of the job.
    pub subtasks: Vec<SubtaskInfo>,
    /// Told when too many checkpoints failed in a row.
    pub supervisor: Recipient<FailJob>,
}

/// A region was redeployed: its subtasks replace their predecessors.
/// Pending checkpoints waited for the failed ones: they are aborted (without
/// counting as failures) and checkpoints go on with the new subtasks.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ReplaceSubtasks {
    /// The region's new subtasks.
    pub subtasks: Vec<SubtaskInfo>,
}

/// A source subtask reached its share of `savepoint_at_records` and holds
/// there: once every running source holds, the savepoint is taken, so it
/// cuts the input at exactly that many records.
#[derive(Message, Clone, Copy, Debug)]
#[rtype(result = "()")]
pub struct RequestSavepoint {
    /// The source's vertex.
    pub vertex: VertexId,
    /// The source subtask.
    pub subtask: SubtaskIndex,
}

/// Receives a savepoint's path, or why it failed.
pub type SavepointReply = Box<dyn FnOnce(Result<PathBuf, super::CheckpointError>) + Send>;

/// Receives the outcome of a stop with a final checkpoint: the savepoint's
/// path (none for a checkpoint), or why it failed.
pub type StopReply = Box<dyn FnOnce(Result<Option<PathBuf>, super::CheckpointError>) + Send>;

/// Asks for a savepoint in `dir`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct TriggerSavepoint {
    /// Where the savepoint's directory is created.
    pub dir: PathBuf,
    /// Told its path, or why it failed.
    pub reply: SavepointReply,
}

/// Stops the job with a final checkpoint, or a savepoint into
/// `savepoint_dir`: no other checkpoint is triggered from now on; once it
/// completed, its notify-complete (two-phase-commit sinks commit) finishes
/// every subtask. If it fails the job runs on.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopWithCheckpoint {
    /// A savepoint instead of a checkpoint, here.
    pub savepoint_dir: Option<PathBuf>,
    /// Told the outcome.
    pub reply: StopReply,
}

/// Stops the coordinator of an attempt that ended (deterministic
/// execution, where it shares the job's thread instead of having an
/// arbiter to stop): later acknowledgements are dropped.
#[derive(Message, Clone, Copy, Debug)]
#[rtype(result = "()")]
pub struct StopCoordinator;
