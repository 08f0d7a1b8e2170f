//! Checkpoints and savepoints, as a floe job uses them: the settings
//! ([`config`]), how they become the coordinator's setup (`setup.rs`), the
//! job handle's requests to the coordinator (`requests.rs`) and restores
//! (`restore.rs`), and where checkpoints are kept ([`location`]: a local
//! directory, or object storage with the `s3` feature, `object_storage`).
//! The protocol itself — tracker, coordinator actor,
//! messages, metadata format and storage — is [`floe_actors::checkpoint`],
//! re-exported here under its usual paths.
//!
//! See `docs/checkpointing.md` for the protocol and how to choose a mode.

pub mod config;
pub mod location;
#[cfg(feature = "s3")]
pub mod object_storage;
pub(crate) mod requests;
pub(crate) mod restore;
pub(crate) mod setup;

pub use config::{CheckpointConfig, CheckpointingMode, ExternalizedRetention};
pub use floe_actors::checkpoint::{
    BlobRef, BlobSink, CHECKPOINT_FORMAT_VERSION, CheckpointError, CheckpointMetadata,
    CheckpointRecord, CheckpointStats, CheckpointStorage, CheckpointStore, LoadedSnapshot,
    OperatorState, SavepointWriter, SnapshotKind, SubtaskOperatorState, SubtaskRuntimeState,
    load_latest,
};
pub use floe_actors::checkpoint::{coordinator, format, savepoint, store};
pub use floe_actors::ids::CheckpointId;
pub use location::{is_object_url, load_snapshot, open_existing_storage, open_storage};
