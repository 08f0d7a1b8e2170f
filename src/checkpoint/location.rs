//! Where checkpoints and savepoints are: a local directory, or object
//! storage named by a URL (`s3://BUCKET/PREFIX`, with the `s3` feature).
//!
//! Every path the job and the CLI take for checkpoints (`--checkpoint-dir`,
//! `--savepoint-dir`, `--from-checkpoint`, `floe checkpoints list|verify`)
//! goes through here, so a URL works wherever a directory does, and a local
//! path behaves exactly as it did: the redb [`CheckpointStore`] and the
//! savepoint directories of [`floe_actors::checkpoint::savepoint`].

use super::{CheckpointError, CheckpointId, CheckpointStorage, CheckpointStore, LoadedSnapshot};
use floe_actors::checkpoint::storage::{LocalSavepoints, SavepointSink, SavepointStorage};
use std::path::Path;
use std::sync::Arc;

/// The URL scheme of S3-compatible object storage.
pub const S3_SCHEME: &str = "s3://";

/// Whether `path` names object storage (`s3://BUCKET/PREFIX`) rather than
/// a local directory.
pub fn is_object_url(path: &Path) -> bool {
    path.to_str().is_some_and(|s| s.starts_with(S3_SCHEME))
}

/// Opens the checkpoint storage at `dir` for a job that writes to it: a
/// local directory (created if missing, its database locked while open) or
/// `s3://BUCKET/PREFIX` (its lease taken while open: one job per prefix).
pub fn open_storage(dir: &Path) -> Result<Arc<dyn CheckpointStorage>, CheckpointError> {
    if is_object_url(dir) {
        return object::open(dir, true);
    }
    Ok(Arc::new(CheckpointStore::open(dir)?))
}

/// Opens the checkpoint storage at `dir` to read it (`floe checkpoints
/// list|verify`, `--resume`): `NotFound` when a local directory has no
/// database; object storage is read without taking its lease.
pub fn open_existing_storage(dir: &Path) -> Result<Arc<dyn CheckpointStorage>, CheckpointError> {
    if is_object_url(dir) {
        return object::open(dir, false);
    }
    Ok(Arc::new(CheckpointStore::open_existing(dir)?))
}

/// Resolves `path` (`--from-checkpoint PATH`, a restart's checkpoint
/// directory) to a verified snapshot, as
/// [`floe_actors::checkpoint::load_snapshot`] does for local paths; on
/// object storage: a checkpoint prefix (its newest intact checkpoint), one
/// checkpoint's `chk-<id>` prefix or a savepoint's prefix.
pub fn load_snapshot(path: &Path) -> Result<LoadedSnapshot, CheckpointError> {
    if is_object_url(path) {
        return object::load_snapshot(path);
    }
    floe_actors::checkpoint::load_snapshot(path)
}

/// Whether `path` holds a single snapshot (a savepoint, a `chk-<id>`
/// directory or a `_metadata`) rather than a checkpoint storage.
pub fn is_single_snapshot(path: &Path) -> Result<bool, CheckpointError> {
    if is_object_url(path) {
        return object::is_single_snapshot(path);
    }
    Ok(!path.join(super::store::DATABASE_FILE).is_file())
}

/// The id of the newest completed checkpoint at the checkpoint storage
/// `dir`; `None` when it has none (or does not exist yet).
pub fn newest_checkpoint(dir: &Path) -> Result<Option<CheckpointId>, CheckpointError> {
    if !is_object_url(dir) && !dir.join(super::store::DATABASE_FILE).is_file() {
        return Ok(None);
    }
    let store = open_existing_storage(dir)?;
    Ok(store.list()?.iter().map(|m| m.id).max())
}

/// Whether `path` holds something to restore: a completed checkpoint of a
/// checkpoint storage, or a snapshot.
pub fn has_snapshot(path: &Path) -> Result<bool, CheckpointError> {
    use super::store::{DATABASE_FILE, METADATA_FILE};
    if is_object_url(path) {
        return Ok(object::is_single_snapshot(path)? || newest_checkpoint(path)?.is_some());
    }
    if path.join(DATABASE_FILE).is_file() {
        return Ok(newest_checkpoint(path)?.is_some());
    }
    Ok(path.join(METADATA_FILE).is_file() || path.is_file())
}

/// Opens savepoints under a local directory or an object storage URL.
#[derive(Clone, Copy, Debug, Default)]
pub struct AnySavepoints;

impl SavepointStorage for AnySavepoints {
    fn open(
        &self,
        target: &Path,
        id: CheckpointId,
    ) -> Result<Box<dyn SavepointSink>, CheckpointError> {
        if is_object_url(target) {
            return object::open_savepoint(target, id);
        }
        LocalSavepoints.open(target, id)
    }
}

#[cfg(feature = "s3")]
mod object {
    pub(super) use crate::checkpoint::object_storage::{
        is_single_snapshot, load_snapshot, open, open_savepoint,
    };
}

/// Without the `s3` feature, a URL is a clear error.
#[cfg(not(feature = "s3"))]
mod object {
    use super::*;

    fn unsupported(path: &Path) -> CheckpointError {
        CheckpointError::Storage {
            location: path.display().to_string(),
            message: "this floe was built without object storage: enable the `s3` feature".into(),
        }
    }

    pub(super) fn open(
        path: &Path,
        _lease: bool,
    ) -> Result<Arc<dyn CheckpointStorage>, CheckpointError> {
        Err(unsupported(path))
    }

    pub(super) fn load_snapshot(path: &Path) -> Result<LoadedSnapshot, CheckpointError> {
        Err(unsupported(path))
    }

    pub(super) fn is_single_snapshot(path: &Path) -> Result<bool, CheckpointError> {
        Err(unsupported(path))
    }

    pub(super) fn open_savepoint(
        path: &Path,
        _id: CheckpointId,
    ) -> Result<Box<dyn SavepointSink>, CheckpointError> {
        Err(unsupported(path))
    }
}
