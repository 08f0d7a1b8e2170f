//! Savepoints on object storage, and finding what a job restores from an
//! `s3://` URL.
//!
//! A savepoint is `TARGET/savepoint-<id>/`: its blobs, then its
//! `_metadata`, written create-only and last; every blob path is relative
//! to it, so it can be copied anywhere. A writer dropped unfinished deletes
//! what it wrote.
//!
//! [`load_snapshot`] resolves a URL as the local one resolves a path: a
//! savepoint's or one checkpoint's prefix (holding `_metadata`), a
//! `_metadata` object, or a checkpoint prefix (its newest intact
//! checkpoint). From a checkpoint prefix it skips, with the restore's
//! fallback line, newer checkpoints that have no usable metadata (their
//! upload was cut off) or a damaged blob — never past one whose
//! two-phase-commit sinks committed output.

use super::Prefix;
use super::client::ATTEMPTS;
use super::storage::ObjectCheckpointStorage;
use crate::checkpoint::{
    BlobRef, BlobSink, CheckpointError, CheckpointId, CheckpointMetadata, LoadedSnapshot,
    SnapshotKind,
};
use floe_actors::checkpoint::files::{METADATA_FILE, check_blob_name, corrupt, parse_chk_dir_name};
use floe_actors::checkpoint::metadata::{decode_metadata, encode_metadata};
use floe_actors::checkpoint::storage::{BlobSource, SavepointSink};
use object_store::PutMode;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// One savepoint being written to object storage.
#[derive(Debug)]
pub struct ObjectSavepoint {
    prefix: Prefix,
    id: CheckpointId,
    finished: bool,
    /// Keys written so far, deleted if the savepoint is not finished.
    written: Mutex<Vec<String>>,
}

/// Starts savepoint `id` under the URL `target`: refuses one that exists;
/// fails at once (no retry) when the server cannot be reached.
pub(crate) fn open_savepoint(
    target: &Path,
    id: CheckpointId,
) -> Result<Box<dyn SavepointSink>, CheckpointError> {
    let prefix = Prefix::parse(target)?.child(&format!("savepoint-{}", id.0));
    let key = prefix.key(METADATA_FILE);
    match prefix.bucket.size(&key, 1) {
        Err(object_store::Error::NotFound { .. }) => {}
        Ok(_) => {
            return Err(CheckpointError::Storage {
                location: prefix.url(""),
                message: "a savepoint is already there".into(),
            });
        }
        Err(e) => return Err(prefix.bucket.error("HEAD", &key, &e)),
    }
    Ok(Box::new(ObjectSavepoint {
        prefix,
        id,
        finished: false,
        written: Mutex::new(Vec::new()),
    }))
}

impl BlobSink for ObjectSavepoint {
    /// Refuses the blobs of another checkpoint: a savepoint holds its own.
    fn put(
        &self,
        checkpoint: CheckpointId,
        name: &str,
        bytes: &[u8],
    ) -> Result<BlobRef, CheckpointError> {
        floe_actors::checkpoint::metadata::check_savepoint_blob(self.id, checkpoint)?;
        check_blob_name(name, &format!("savepoint {}", self.id.0))?;
        let key = self.prefix.key(name);
        if let Ok(mut w) = self.written.lock() {
            w.push(key.clone());
        }
        self.prefix
            .bucket
            .put(&key, bytes.to_vec(), PutMode::Overwrite, ATTEMPTS)
            .map_err(|e| self.prefix.bucket.error("PUT", &key, &e))?;
        Ok(BlobRef {
            path: name.to_string(),
            len: bytes.len() as u64,
            checksum: crc32fast::hash(bytes),
        })
    }
}

impl SavepointSink for ObjectSavepoint {
    fn finish(mut self: Box<Self>, meta: &CheckpointMetadata) -> Result<PathBuf, CheckpointError> {
        let id = self.id;
        let failed = |message: String| CheckpointError::Failed {
            checkpoint: id,
            message,
        };
        if meta.kind != SnapshotKind::Savepoint || meta.id != self.id {
            return Err(failed(format!(
                "metadata of {:?} {} given to savepoint {}",
                meta.kind, meta.id.0, id.0
            )));
        }
        let blobs = meta.blobs();
        let keys: Vec<String> = blobs.iter().map(|b| self.prefix.key(&b.path)).collect();
        for (blob, size) in blobs.iter().zip(self.prefix.bucket.sizes(keys)) {
            if !matches!(size, Ok(n) if n == blob.len) {
                return Err(failed(format!(
                    "blob '{}' is not an object of {} bytes in the savepoint",
                    blob.path, blob.len
                )));
            }
        }
        let key = self.prefix.key(METADATA_FILE);
        self.prefix
            .bucket
            .put(&key, encode_metadata(meta), PutMode::Create, ATTEMPTS)
            .map_err(|e| self.prefix.bucket.error("PUT", &key, &e))?;
        self.finished = true;
        Ok(PathBuf::from(self.prefix.url("")))
    }
}

impl Drop for ObjectSavepoint {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        // An aborted savepoint: no `_metadata`, so nothing refers to it.
        let written = std::mem::take(&mut *self.written.lock().unwrap_or_else(|e| e.into_inner()));
        let _ = self.prefix.bucket.delete_many(written);
    }
}

/// Whether the URL `path` names one snapshot: a `_metadata` object, or a
/// prefix holding one. The first request of a restore or an inspection:
/// an unreachable server fails it at once, without retries.
pub(crate) fn is_single_snapshot(path: &Path) -> Result<bool, CheckpointError> {
    let prefix = Prefix::parse(path)?;
    if prefix.name() == METADATA_FILE {
        return Ok(true);
    }
    let key = prefix.key(METADATA_FILE);
    match prefix.bucket.size(&key, 1) {
        Ok(_) => Ok(true),
        Err(object_store::Error::NotFound { .. }) => Ok(false),
        Err(e) => Err(prefix.bucket.error("HEAD", &key, &e)),
    }
}

/// Resolves the URL `path` to a verified snapshot (see the module doc).
pub(crate) fn load_snapshot(path: &Path) -> Result<LoadedSnapshot, CheckpointError> {
    let prefix = Prefix::parse(path)?;
    if prefix.name() == METADATA_FILE {
        return load_dir(&prefix.parent(), path);
    }
    if is_single_snapshot(path)? {
        return load_dir(&prefix, path);
    }
    let storage = ObjectCheckpointStorage::open(prefix, false)?;
    load_latest(&storage, path)
}

/// The newest intact checkpoint of `storage`, skipping newer ones without
/// usable metadata (reported in [`LoadedSnapshot::skipped`]).
fn load_latest(
    storage: &ObjectCheckpointStorage,
    path: &Path,
) -> Result<LoadedSnapshot, CheckpointError> {
    let scan = storage.scan()?;
    let newest = scan.complete.keys().next_back().copied();
    let cut_off: Vec<(CheckpointId, CheckpointError)> = scan
        .incomplete
        .into_iter()
        .filter(|(id, _)| newest.is_none_or(|n| id.0 > n))
        .collect();
    let mut loaded = match floe_actors::checkpoint::load_latest(storage) {
        Ok(loaded) => loaded,
        Err(CheckpointError::NotFound { .. }) => {
            return Err(CheckpointError::NotFound {
                path: path.to_path_buf(),
            });
        }
        Err(e) => return Err(e),
    };
    for (id, e) in &cut_off {
        tracing::warn!(
            checkpoint = loaded.meta.id.0,
            skipped = id.0,
            reason = %e,
            "restoring from an older checkpoint: a newer one never completed"
        );
    }
    loaded.skipped.extend(cut_off);
    loaded.skipped.sort_by_key(|s| std::cmp::Reverse(s.0));
    Ok(loaded)
}

/// Loads the snapshot whose `_metadata` is under `dir`; `source` is what
/// the user gave.
fn load_dir(dir: &Prefix, source: &Path) -> Result<LoadedSnapshot, CheckpointError> {
    let key = dir.key(METADATA_FILE);
    let file = PathBuf::from(dir.url(METADATA_FILE));
    let label = source.display().to_string();
    let bytes = match dir.bucket.get(&key) {
        Ok((bytes, _)) => bytes,
        Err(object_store::Error::NotFound { .. }) => {
            return Err(CheckpointError::NotFound {
                path: source.to_path_buf(),
            });
        }
        Err(e) => return Err(dir.bucket.error("GET", &key, &e)),
    };
    let meta = decode_metadata(&bytes, &label, &file)?;
    let label = meta.id.0.to_string();
    let root = match meta.kind {
        SnapshotKind::Savepoint => dir.clone(),
        SnapshotKind::Checkpoint => {
            if parse_chk_dir_name(dir.name()).is_some_and(|d| d != meta.id) {
                return Err(corrupt(
                    &label,
                    &file,
                    format!(
                        "belongs to checkpoint {}, not to '{}'",
                        meta.id.0,
                        dir.url("")
                    ),
                ));
            }
            dir.parent()
        }
    };
    root.verify_blobs(&meta, &label)?;
    Ok(LoadedSnapshot {
        meta,
        root: PathBuf::from(root.url("")),
        source: PathBuf::from(dir.url("")),
        skipped: Vec::new(),
        blobs: Some(Arc::new(root) as Arc<dyn BlobSource>),
    })
}
