//! Durable files and blob names: how a blob is named inside a checkpoint
//! (`chk-<id>/<name>`, `shared/<name>`) or a savepoint, written (temp file,
//! fsync, rename, fsync of the directory) and read back checked (length and
//! CRC-32), and how the store's errors are built.

use super::error::CheckpointError;
use super::format::BlobRef;
use crate::ids::{CheckpointId, SubtaskIndex, VertexId};
use std::collections::HashSet;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The name of the metadata file of a checkpoint or savepoint directory.
pub const METADATA_FILE: &str = "_metadata";
/// The directory, relative to the store, of blobs shared across checkpoints.
pub const SHARED_DIR: &str = "shared";

/// The name of the blob holding part `part` (`keyed`, `split`, `union`) of
/// the `index`-th operator of a chain, in subtask `subtask` of vertex
/// `vertex`: unique within one checkpoint. Every blob a subtask writes is
/// named here or by [`channel_blob_name`].
pub fn operator_blob_name(
    vertex: VertexId,
    subtask: SubtaskIndex,
    index: usize,
    part: &str,
) -> String {
    format!("v{}-s{}-op{index}-{part}", vertex.0, subtask.0)
}

/// The name of the blob holding a subtask's channel state of an unaligned
/// checkpoint; `side` is `input` or `output`.
pub fn channel_blob_name(vertex: VertexId, subtask: SubtaskIndex, side: &str) -> String {
    format!("v{}-s{}-{side}-channels", vertex.0, subtask.0)
}

/// Reads `blob` under `root`, checking its length and checksum;
/// `checkpoint` names the snapshot in errors.
pub fn read_blob_checked(
    root: &Path,
    blob: &BlobRef,
    checkpoint: &str,
) -> Result<Vec<u8>, CheckpointError> {
    let path = blob_path(root, blob, checkpoint)?;
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(corrupt(checkpoint, &path, "missing"));
        }
        Err(e) => return Err(io_err("read", &path, e)),
    };
    if bytes.len() as u64 != blob.len {
        return Err(corrupt(
            checkpoint,
            &path,
            format!("length {} bytes, expected {}", bytes.len(), blob.len),
        ));
    }
    let actual = crc32fast::hash(&bytes);
    if actual != blob.checksum {
        return Err(corrupt(
            checkpoint,
            &path,
            format!(
                "checksum mismatch: {actual:08x}, expected {:08x}",
                blob.checksum
            ),
        ));
    }
    Ok(bytes)
}

/// The file of `blob` under `root`, refusing paths that would leave `root`.
pub(crate) fn blob_path(
    root: &Path,
    blob: &BlobRef,
    checkpoint: &str,
) -> Result<PathBuf, CheckpointError> {
    if !is_plain_relative(&blob.path) {
        return Err(corrupt(
            checkpoint,
            &root.join(METADATA_FILE),
            format!("blob path '{}' is not a plain relative path", blob.path),
        ));
    }
    Ok(root.join(&blob.path))
}

fn is_plain_relative(path: &str) -> bool {
    !path.is_empty()
        && path
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != ".." && !c.contains('\\'))
}

/// Err unless `name` is a blob name a store accepts: a relative
/// `/`-separated path of plain components, none starting with `.`, other
/// than `_metadata`; `checkpoint` names the snapshot in the error.
pub fn check_blob_name(name: &str, checkpoint: &str) -> Result<(), CheckpointError> {
    let ok = is_plain_relative(name)
        && name.split('/').all(|c| !c.starts_with('.'))
        && name != METADATA_FILE;
    if ok {
        Ok(())
    } else {
        Err(invalid_name(
            name,
            format!(
                "invalid blob name for {checkpoint}: use `/`-separated plain components, \
                 not starting with '.', other than `{METADATA_FILE}`"
            ),
        ))
    }
}

/// Writes the blob `rel` (relative to `root`) and returns its reference.
pub(crate) fn write_blob_file(
    root: &Path,
    rel: String,
    bytes: &[u8],
) -> Result<BlobRef, CheckpointError> {
    let path = root.join(&rel);
    if let Some(parent) = path.parent() {
        create_dir_durably(root, parent)?;
    }
    write_file_atomic(&path, bytes)?;
    Ok(BlobRef {
        path: rel,
        len: bytes.len() as u64,
        checksum: crc32fast::hash(bytes),
    })
}

/// Writes `bytes` to `path` durably: a temp file in the same directory,
/// fsync, rename, fsync of the directory.
pub(crate) fn write_file_atomic(path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{file_name}.tmp-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = File::create(&tmp).map_err(|e| io_err("create", &tmp, e))?;
        f.write_all(bytes).map_err(|e| io_err("write", &tmp, e))?;
        f.sync_all().map_err(|e| io_err("sync", &tmp, e))?;
        drop(f);
        fs::rename(&tmp, path).map_err(|e| io_err("rename", path, e))?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Creates `dir` (inside `root`) and its missing parents so that they
/// survive a crash: the directory entries are fsynced up to `root`.
pub(crate) fn create_dir_durably(root: &Path, dir: &Path) -> Result<(), CheckpointError> {
    if dir.is_dir() {
        // Whoever created it synced it before its write returned.
        return Ok(());
    }
    fs::create_dir_all(dir).map_err(|e| io_err("create", dir, e))?;
    let mut d = dir;
    while d != root {
        let Some(up) = d.parent() else { break };
        sync_dir(up)?;
        d = up;
    }
    Ok(())
}

/// Makes a rename in `dir` durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), CheckpointError> {
    #[cfg(unix)]
    {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_err("sync", dir, e))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// Removes the files under `dir` (relative paths from `root`) that are
/// neither `referenced` nor `keep`, nor temp files (`.`-prefixed: a write may
/// be in progress), then the directories left empty (`dir` included unless
/// it is `shared/`).
pub(crate) fn sweep(
    root: &Path,
    dir: &Path,
    referenced: &HashSet<String>,
    keep: &HashSet<String>,
) -> Result<(), CheckpointError> {
    fn walk(
        root: &Path,
        dir: &Path,
        referenced: &HashSet<String>,
        keep: &HashSet<String>,
    ) -> Result<bool, CheckpointError> {
        let mut empty = true;
        let entries = fs::read_dir(dir).map_err(|e| io_err("read", dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| io_err("read", dir, e))?;
            let path = entry.path();
            let file_type = entry.file_type().map_err(|e| io_err("read", &path, e))?;
            if file_type.is_dir() {
                if walk(root, &path, referenced, keep)? {
                    match fs::remove_dir(&path) {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Err(io_err("remove", &path, e)),
                    }
                } else {
                    empty = false;
                }
                continue;
            }
            let rel = relative(root, &path);
            let is_temp = entry.file_name().to_string_lossy().starts_with('.');
            if is_temp || referenced.contains(&rel) || keep.contains(&rel) {
                empty = false;
                continue;
            }
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err("remove", &path, e)),
            }
        }
        Ok(empty)
    }
    let empty = walk(root, dir, referenced, keep)?;
    if empty && dir != root.join(SHARED_DIR) {
        let _ = fs::remove_dir(dir);
    }
    Ok(())
}

/// `path` relative to `root`, with `/` separators.
fn relative(root: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(root).unwrap_or(path);
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

pub(crate) fn remove_dir_all(dir: &Path) -> Result<(), CheckpointError> {
    match fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("remove", dir, e)),
    }
}

/// `chk-<id>`.
pub fn chk_dir_name(id: CheckpointId) -> String {
    format!("chk-{}", id.0)
}

/// The id of a `chk-<digits>` directory name.
pub fn parse_chk_dir_name(name: &str) -> Option<CheckpointId> {
    let digits = name.strip_prefix("chk-")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().map(CheckpointId)
}

pub(crate) fn io_err(action: &'static str, path: &Path, e: std::io::Error) -> CheckpointError {
    CheckpointError::Io {
        action,
        path: path.to_path_buf(),
        source: Arc::new(e),
    }
}

/// A blob name that would leave its directory (or clash with `_metadata`):
/// an [`std::io::ErrorKind::InvalidInput`] on action "name".
pub(crate) fn invalid_name(name: &str, message: String) -> CheckpointError {
    CheckpointError::Io {
        action: "name",
        path: PathBuf::from(name),
        source: Arc::new(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            message,
        )),
    }
}

/// An error opening the database file `path`: another process holds it, or
/// the file is damaged or not a checkpoint database.
pub(crate) fn open_err(path: &Path, e: redb::DatabaseError) -> CheckpointError {
    let message = match &e {
        redb::DatabaseError::DatabaseAlreadyOpen => {
            "in use by another process (a running job holds it)".to_string()
        }
        e => format!("damaged or not a checkpoint database: {e}"),
    };
    CheckpointError::Database {
        path: path.to_path_buf(),
        message,
        source: Some(Arc::new(e.into())),
    }
}

/// A failed database call on `path`, keeping redb's error as the source.
pub(crate) fn db_err(path: &Path, e: impl Into<redb::Error>) -> CheckpointError {
    let e: redb::Error = e.into();
    CheckpointError::Database {
        path: path.to_path_buf(),
        message: e.to_string(),
        source: Some(Arc::new(e)),
    }
}

/// A [`CheckpointError::Corrupt`] naming `checkpoint` and `file`.
pub fn corrupt(checkpoint: &str, file: &Path, reason: impl Into<String>) -> CheckpointError {
    CheckpointError::Corrupt {
        checkpoint: checkpoint.to_string(),
        file: file.to_path_buf(),
        reason: reason.into(),
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every blob name a subtask writes is valid for the store and unique
    /// within a checkpoint (the oracle: a set of all of them has one entry
    /// per blob).
    #[test]
    fn blob_names_are_valid_and_unique_within_a_checkpoint() {
        let mut names = HashSet::new();
        let mut blobs = 0;
        for v in 0..12 {
            for s in 0..12 {
                let (v, s) = (VertexId(v), SubtaskIndex(s));
                for i in 0..12 {
                    for part in ["keyed", "split", "union"] {
                        names.insert(operator_blob_name(v, s, i, part));
                        blobs += 1;
                    }
                }
                for side in ["input", "output"] {
                    names.insert(channel_blob_name(v, s, side));
                    blobs += 1;
                }
            }
        }
        assert_eq!(names.len(), blobs);
        for name in &names {
            check_blob_name(name, "chk-1").expect("a valid blob name");
        }
    }

    #[test]
    fn chk_dir_names_round_trip() {
        assert_eq!(
            parse_chk_dir_name(&chk_dir_name(CheckpointId(42))),
            Some(CheckpointId(42))
        );
        assert_eq!(parse_chk_dir_name("chk-"), None);
        assert_eq!(parse_chk_dir_name("chk-1a"), None);
        assert_eq!(parse_chk_dir_name("chk--1"), None);
        assert_eq!(parse_chk_dir_name("shared"), None);
    }

    #[test]
    fn blob_names_stay_inside() {
        assert!(check_blob_name("op/0/keyed-1", "1").is_ok());
        for bad in [
            "",
            "/abs",
            "a//b",
            "../x",
            "a/./b",
            ".hidden",
            "_metadata",
            "a\\b",
        ] {
            assert!(check_blob_name(bad, "1").is_err(), "{bad:?} accepted");
        }
    }
}
