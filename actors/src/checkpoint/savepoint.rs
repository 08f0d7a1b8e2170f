//! Savepoints, and finding the snapshot a job restores from
//! (`--from-checkpoint PATH`).
//!
//! A savepoint is self-contained and portable: the directory
//! `<savepoint_dir>/savepoint-<id>` holds every blob it needs and its
//! `_metadata` (same encoding as a checkpoint's, see [`super::metadata`]), and
//! every [`BlobRef::path`] is relative to that directory, so it can be copied
//! or moved anywhere. A savepoint exists once its `_metadata` is written
//! (after all its blobs); a writer dropped before [`SavepointWriter::finish`]
//! removes its directory.
//!
//! [`load_snapshot`] resolves a checkpoint directory, one checkpoint's
//! `chk-<id>` directory, a savepoint directory or a `_metadata` file, and
//! verifies every blob of what it returns, so a restore never starts from a
//! damaged snapshot. From a checkpoint directory it may fall back to an older
//! checkpoint, but never past one whose two-phase-commit sinks committed
//! output (that output would be produced twice).

use super::error::CheckpointError;
use super::files::{
    METADATA_FILE, corrupt, invalid_name, io_err, parse_chk_dir_name, read_blob_checked, sync_dir,
    write_blob_file, write_file_atomic,
};
use super::format::{BlobRef, CheckpointMetadata, SnapshotKind};
use super::metadata::{encode_metadata, read_metadata_file, verify_blobs};
use super::storage::{BlobSink, BlobSource, CheckpointStorage, SavepointSink};
use super::store::{CheckpointStore, DATABASE_FILE};
use crate::ids::CheckpointId;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Writes one savepoint: its blobs, then its `_metadata`.
#[derive(Debug)]
pub struct SavepointWriter {
    dir: PathBuf,
    id: CheckpointId,
    finished: bool,
}

impl SavepointWriter {
    /// Creates the directory `<savepoint_dir>/savepoint-<id>` (and
    /// `savepoint_dir` if missing); refuses one that already exists.
    pub fn new(savepoint_dir: &Path, id: CheckpointId) -> Result<Self, CheckpointError> {
        fs::create_dir_all(savepoint_dir).map_err(|e| io_err("create", savepoint_dir, e))?;
        let dir = savepoint_dir.join(format!("savepoint-{}", id.0));
        fs::create_dir(&dir).map_err(|e| io_err("create", &dir, e))?;
        Ok(SavepointWriter {
            dir,
            id,
            finished: false,
        })
    }

    /// The savepoint's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes `bytes` as the blob `name` (a relative `/`-separated path of
    /// plain components, not starting with `.`) durably; its path is relative
    /// to the savepoint directory.
    pub fn write_blob(&self, name: &str, bytes: &[u8]) -> Result<BlobRef, CheckpointError> {
        if !valid_name(name) {
            return Err(invalid_name(
                name,
                format!(
                    "invalid blob name for savepoint {}: use `/`-separated plain components, \
                     not starting with '.', other than `{METADATA_FILE}`",
                    self.id.0
                ),
            ));
        }
        write_blob_file(&self.dir, name.to_string(), bytes)
    }

    /// Completes the savepoint: checks that `meta` is this savepoint's (kind
    /// [`SnapshotKind::Savepoint`], same id) and that every blob it names is
    /// in the savepoint's directory with its length, then writes `_metadata`
    /// (fsync) and returns the savepoint's path.
    pub fn finish(mut self, meta: &CheckpointMetadata) -> Result<PathBuf, CheckpointError> {
        let failed = |message: String| CheckpointError::Failed {
            checkpoint: self.id,
            message,
        };
        if meta.kind != SnapshotKind::Savepoint || meta.id != self.id {
            return Err(failed(format!(
                "metadata of {:?} {} given to savepoint {}",
                meta.kind, meta.id.0, self.id.0
            )));
        }
        for blob in meta.blobs() {
            let path = self.dir.join(&blob.path);
            match fs::metadata(&path) {
                Ok(m) if valid_name(&blob.path) && m.is_file() && m.len() == blob.len => {}
                _ => {
                    return Err(failed(format!(
                        "blob '{}' is not a file of {} bytes in the savepoint directory",
                        blob.path, blob.len
                    )));
                }
            }
        }
        write_file_atomic(&self.dir.join(METADATA_FILE), &encode_metadata(meta))?;
        if let Some(parent) = self.dir.parent() {
            sync_dir(parent)?;
        }
        self.finished = true;
        Ok(self.dir.clone())
    }
}

impl BlobSink for SavepointWriter {
    /// Refuses the blobs of another checkpoint: a savepoint holds its own.
    fn put(
        &self,
        checkpoint: CheckpointId,
        name: &str,
        bytes: &[u8],
    ) -> Result<BlobRef, CheckpointError> {
        super::metadata::check_savepoint_blob(self.id, checkpoint)?;
        self.write_blob(name, bytes)
    }
}

impl SavepointSink for SavepointWriter {
    fn finish(self: Box<Self>, meta: &CheckpointMetadata) -> Result<PathBuf, CheckpointError> {
        SavepointWriter::finish(*self, meta)
    }
}

impl Drop for SavepointWriter {
    fn drop(&mut self) {
        if !self.finished {
            // An aborted savepoint: no `_metadata`, so nothing refers to it.
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name != METADATA_FILE
        && name
            .split('/')
            .all(|c| !c.is_empty() && !c.starts_with('.') && !c.contains('\\'))
}

/// A verified snapshot to restore from.
#[derive(Debug, Clone)]
pub struct LoadedSnapshot {
    /// Its metadata.
    pub meta: CheckpointMetadata,
    /// The base of its [`BlobRef::path`]s: the checkpoint directory, or the
    /// savepoint's directory.
    pub root: PathBuf,
    /// Where it was found (`chk-<id>` or savepoint directory), for messages.
    pub source: PathBuf,
    /// Newer checkpoints refused while falling back to this one, newest
    /// first: each one's id and why.
    pub skipped: Vec<(CheckpointId, CheckpointError)>,
    /// Where its blobs are read from when they are not files under `root`
    /// (object storage); `None`: they are.
    pub blobs: Option<Arc<dyn BlobSource>>,
}

impl LoadedSnapshot {
    /// Reads one of its blobs, checking length and checksum; errors name the
    /// checkpoint.
    pub fn read_blob(&self, blob: &BlobRef) -> Result<Vec<u8>, CheckpointError> {
        let label = self.meta.id.0.to_string();
        match &self.blobs {
            Some(source) => source.read_blob(&label, blob),
            None => read_blob_checked(&self.root, blob, &label),
        }
    }
}

/// Resolves `path` (`--from-checkpoint PATH`) to a verified snapshot:
///
/// - a checkpoint directory (holding `checkpoints.redb`): the newest intact
///   committed checkpoint; a newer one that is refused is skipped only if it
///   has no transactional sinks, otherwise its error is returned; if none is
///   intact, the error of the newest; `NotFound` if none is committed;
/// - one checkpoint's directory (`DIR/chk-<id>`, holding `_metadata`): that
///   checkpoint, its blobs under the parent directory (refused if the
///   parent's database can be read and does not list it as committed);
/// - a savepoint directory (holding `_metadata`): that savepoint;
/// - a `_metadata` file: as its directory.
///
/// Anything else is `NotFound`.
pub fn load_snapshot(path: &Path) -> Result<LoadedSnapshot, CheckpointError> {
    if path.is_file() && path.file_name().is_some_and(|n| n == METADATA_FILE) {
        let dir = path.parent().unwrap_or(Path::new("."));
        return load_snapshot_dir(dir, path);
    }
    if path.join(DATABASE_FILE).is_file() {
        return load_from_store(path);
    }
    if path.join(METADATA_FILE).is_file() {
        return load_snapshot_dir(path, path);
    }
    Err(CheckpointError::NotFound {
        path: path.to_path_buf(),
    })
}

fn load_from_store(dir: &Path) -> Result<LoadedSnapshot, CheckpointError> {
    load_latest(&CheckpointStore::open_existing(dir)?)
}

/// The newest intact committed checkpoint of an open store, with the fallback
/// rule of [`load_snapshot`] on a checkpoint directory: for a restore in the
/// process that holds the store (the database admits one opener at a time).
pub fn load_latest<S: CheckpointStorage + ?Sized>(
    store: &S,
) -> Result<LoadedSnapshot, CheckpointError> {
    let dir = PathBuf::from(store.location());
    let committed = store.list()?;
    let mut skipped: Vec<(CheckpointId, CheckpointError)> = Vec::new();
    for recorded in committed.iter().rev() {
        match store.verified_metadata(recorded.id) {
            Ok(meta) => {
                for (id, e) in &skipped {
                    tracing::warn!(
                        checkpoint = meta.id.0,
                        skipped = id.0,
                        reason = %e,
                        "restoring from an older checkpoint: a newer one is damaged"
                    );
                }
                return Ok(LoadedSnapshot {
                    source: store.checkpoint_location(meta.id),
                    meta,
                    root: dir,
                    skipped,
                    blobs: store.blob_source(),
                });
            }
            // Its sinks committed output: an older state would repeat it.
            Err(e) if !recorded.transactional_sinks.is_empty() => return Err(e),
            Err(e) => skipped.push((recorded.id, e)),
        }
    }
    match skipped.into_iter().next() {
        Some((_, newest)) => Err(newest),
        None => Err(CheckpointError::NotFound { path: dir }),
    }
}

/// Loads the snapshot in `dir` (which holds `_metadata`); `source` is the path
/// the user gave.
fn load_snapshot_dir(dir: &Path, source: &Path) -> Result<LoadedSnapshot, CheckpointError> {
    let file = dir.join(METADATA_FILE);
    let label = source.display().to_string();
    let meta = read_metadata_file(&file, &label)?;
    let label = meta.id.0.to_string();
    let root = match meta.kind {
        SnapshotKind::Savepoint => dir.to_path_buf(),
        SnapshotKind::Checkpoint => {
            let root = dir.parent().unwrap_or(Path::new(".")).to_path_buf();
            check_committed(&root, dir, &meta, &file)?;
            root
        }
    };
    verify_blobs(&root, &meta, &label)?;
    Ok(LoadedSnapshot {
        meta,
        root,
        source: dir.to_path_buf(),
        skipped: Vec::new(),
        blobs: None,
    })
}

/// A `chk-<id>` directory whose `_metadata` was written but whose commit
/// transaction never ran is not a checkpoint: refuse it when the store's
/// database says so. A database that cannot be opened (a running job holds
/// its lock) is not consulted.
fn check_committed(
    root: &Path,
    dir: &Path,
    meta: &CheckpointMetadata,
    file: &Path,
) -> Result<(), CheckpointError> {
    let label = meta.id.0.to_string();
    let dir_id = dir
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(parse_chk_dir_name);
    if dir_id.is_some_and(|d| d != meta.id) {
        return Err(corrupt(
            &label,
            file,
            format!(
                "belongs to checkpoint {}, not to '{}'",
                meta.id.0,
                dir.display()
            ),
        ));
    }
    if !root.join(DATABASE_FILE).is_file() {
        return Ok(());
    }
    let Ok(store) = CheckpointStore::open_existing(root) else {
        return Ok(());
    };
    match store.get(meta.id)? {
        Some(recorded) if recorded == *meta => Ok(()),
        Some(_) => Err(corrupt(
            &label,
            file,
            "differs from the checkpoint recorded in the database",
        )),
        None => Err(corrupt(
            &label,
            file,
            "not a committed checkpoint (never committed, or removed by retention)",
        )),
    }
}
