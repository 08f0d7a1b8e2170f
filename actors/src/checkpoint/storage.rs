//! Where checkpoints are kept, as the protocol sees it.
//!
//! [`BlobSink`] is the one concept for persisting state bytes: the
//! asynchronous part of a subtask's snapshot hands every blob to a sink,
//! which is a checkpoint store, a savepoint being written, or the router
//! that picks between them by checkpoint id. [`CheckpointStorage`] is what
//! the coordinator and a restore need of a store: the redb index with local
//! files ([`CheckpointStore`](super::store::CheckpointStore)) is one
//! implementation; an object store (`floe`'s `s3` feature) is another.
//! [`SavepointStorage`] opens a savepoint under a target ([`LocalSavepoints`]
//! for directories), and [`BlobSource`] reads back the blobs of a snapshot
//! that is not in a local directory.

use super::error::CheckpointError;
use super::format::{BlobRef, CheckpointMetadata};
use crate::ids::CheckpointId;
use std::path::{Path, PathBuf};

/// Persists the blobs of snapshots.
pub trait BlobSink: Send + Sync {
    /// Writes `bytes` durably as the blob `name` (a relative `/`-separated
    /// path of plain components) of checkpoint `checkpoint`, and returns its
    /// reference (length and CRC-32).
    fn put(
        &self,
        checkpoint: CheckpointId,
        name: &str,
        bytes: &[u8],
    ) -> Result<BlobRef, CheckpointError>;
}

/// A store of completed checkpoints: their blobs, their metadata and the
/// commit point that makes a checkpoint exist.
///
/// Implementations are blocking I/O: call them from a blocking pool or an
/// I/O arbiter, never on the data path.
pub trait CheckpointStorage: BlobSink {
    /// Writes a blob later checkpoints may reference too (incremental
    /// state); it is kept while a retained checkpoint references it.
    fn write_shared_blob(&self, name: &str, bytes: &[u8]) -> Result<BlobRef, CheckpointError>;
    /// Commits `meta`: the checkpoint exists once this returned `Ok`. Then
    /// keeps the newest `retain` checkpoints and what they reference.
    fn commit(&self, meta: &CheckpointMetadata, retain: usize) -> Result<(), CheckpointError>;
    /// Removes what an aborted (never committed) checkpoint wrote.
    fn discard(&self, id: CheckpointId);
    /// The committed checkpoints, oldest first.
    fn list(&self) -> Result<Vec<CheckpointMetadata>, CheckpointError>;
    /// The committed checkpoint `id`, if any.
    fn get(&self, id: CheckpointId) -> Result<Option<CheckpointMetadata>, CheckpointError>;
    /// The committed checkpoint `id` with every blob checked.
    fn verified_metadata(&self, id: CheckpointId) -> Result<CheckpointMetadata, CheckpointError>;
    /// A blob of checkpoint `id`, its length and checksum checked.
    fn read_blob(&self, id: CheckpointId, blob: &BlobRef) -> Result<Vec<u8>, CheckpointError>;
    /// Deletes every checkpoint; the store stays usable.
    fn clear(&self) -> Result<(), CheckpointError>;
    /// The highest id ever committed (0 if none).
    fn max_id(&self) -> Result<CheckpointId, CheckpointError>;
    /// Where the store is, for messages (a directory, or a URL).
    fn location(&self) -> String;
    /// Where checkpoint `id` is, for messages.
    fn checkpoint_location(&self, id: CheckpointId) -> PathBuf {
        PathBuf::from(self.location()).join(super::files::chk_dir_name(id))
    }
    /// Reads the blobs of a restored checkpoint when they are not files
    /// under [`CheckpointStorage::location`] (`None`: they are).
    fn blob_source(&self) -> Option<std::sync::Arc<dyn BlobSource>> {
        None
    }
    /// The job that wrote here ended: give up what keeps other jobs out
    /// (object storage's lease; a local store's lock goes with the last
    /// handle). Later commits fail.
    fn release(&self) {}
}

/// Reads the blobs of a snapshot kept elsewhere than in a local directory
/// (object storage), checking their length and checksum.
pub trait BlobSource: Send + Sync + std::fmt::Debug {
    /// The blob `blob` of checkpoint or savepoint `label` (named in
    /// errors), its length and CRC-32 checked.
    fn read_blob(&self, label: &str, blob: &BlobRef) -> Result<Vec<u8>, CheckpointError>;
}

/// A savepoint being written: its blobs ([`BlobSink::put`]), then its
/// metadata, last. Dropped unfinished, it removes what it wrote.
pub trait SavepointSink: BlobSink {
    /// Completes the savepoint with `meta` (written after every blob it
    /// names was checked) and returns where it is.
    fn finish(self: Box<Self>, meta: &CheckpointMetadata) -> Result<PathBuf, CheckpointError>;
}

/// Opens savepoints under a target (`--savepoint-dir`).
pub trait SavepointStorage: Send + Sync {
    /// Starts savepoint `id` under `target`; refuses one that exists.
    fn open(
        &self,
        target: &Path,
        id: CheckpointId,
    ) -> Result<Box<dyn SavepointSink>, CheckpointError>;
}

/// Savepoints in local directories ([`SavepointWriter`](super::savepoint::SavepointWriter)).
#[derive(Clone, Copy, Debug, Default)]
pub struct LocalSavepoints;

impl SavepointStorage for LocalSavepoints {
    fn open(
        &self,
        target: &Path,
        id: CheckpointId,
    ) -> Result<Box<dyn SavepointSink>, CheckpointError> {
        Ok(Box::new(super::savepoint::SavepointWriter::new(
            target, id,
        )?))
    }
}
