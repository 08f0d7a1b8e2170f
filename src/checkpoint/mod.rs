//! Checkpoints and savepoints: the snapshot protocol's coordinator, the
//! on-disk format and the store.
//!
//! See `docs/checkpointing.md` for the protocol and how to choose a mode.

pub mod config;
pub mod coordinator;
mod error;
pub mod format;
mod redb_guard;
pub(crate) mod restore;
pub mod savepoint;
pub mod store;

pub use config::{CheckpointConfig, CheckpointingMode, ExternalizedRetention};
pub use coordinator::{CheckpointRecord, CheckpointStats};
pub use error::CheckpointError;
pub use format::{
    BlobRef, CHECKPOINT_FORMAT_VERSION, CheckpointMetadata, OperatorState, SnapshotId,
    SnapshotKind, SubtaskOperatorState, SubtaskRuntimeState,
};
pub use savepoint::{LoadedSnapshot, SavepointWriter, load_latest, load_snapshot};
pub use store::{BlobSink, CheckpointStore};
