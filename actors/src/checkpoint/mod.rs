//! The checkpoint protocol, in one place.
//!
//! Following one checkpoint from trigger to commit:
//!
//! 1. [`tracker`] decides (pure: events in, [`tracker::Action`]s out);
//!    [`coordinator`] is the actor that feeds it and carries the actions
//!    out: it sends [`messages::TriggerCheckpoint`] to the sources.
//! 2. A subtask captures its chain's state ([`capture`]) when the barrier
//!    is complete, writes the blobs to a [`storage::BlobSink`] (names from
//!    [`files`]) off its thread, and acknowledges
//!    ([`messages::AcknowledgeCheckpoint`]) or declines.
//! 3. With every ack, the coordinator commits the [`format::CheckpointMetadata`]
//!    (encoded by [`metadata`]) to a [`storage::CheckpointStorage`] — the
//!    redb index with local files is [`store::CheckpointStore`] — or
//!    finishes a savepoint ([`savepoint`]), then notifies every subtask
//!    ([`messages::NotifyCheckpoint`]), on which two-phase-commit sinks commit.
//!
//! See `docs/checkpointing.md` for the protocol and how to choose a mode.

pub mod capture;
pub mod coordinator;
mod error;
pub mod files;
pub mod format;
pub mod messages;
pub mod metadata;
mod redb_guard;
pub mod savepoint;
pub mod stats;
pub mod storage;
pub mod store;
pub mod tracker;

pub use error::CheckpointError;
pub use format::{
    BlobRef, CHECKPOINT_FORMAT_VERSION, CheckpointMetadata, OperatorState, SnapshotKind,
    SubtaskOperatorState, SubtaskRuntimeState,
};
pub use savepoint::{LoadedSnapshot, SavepointWriter, load_latest, load_snapshot};
pub use stats::{CheckpointRecord, CheckpointStats};
pub use storage::{BlobSink, CheckpointStorage};
pub use store::CheckpointStore;

/// A subtask: its vertex and index.
pub type SubtaskKey = (crate::ids::VertexId, crate::ids::SubtaskIndex);
