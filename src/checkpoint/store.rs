//! The checkpoint store: one directory (`--checkpoint-dir DIR`) holding the
//! completed checkpoints of a job.
//!
//! Layout:
//! - `DIR/checkpoints.redb`: the commit point and the index. Table
//!   `checkpoints` maps a checkpoint id to its encoded metadata (the same
//!   bytes as its `_metadata` file); table `counters` keeps `max_id`, the
//!   highest id ever committed.
//! - `DIR/chk-<id>/`: the blob files of checkpoint `<id>` and its `_metadata`.
//! - `DIR/shared/`: blobs that later checkpoints may reference too
//!   (incremental state).
//!
//! Invariants:
//! - A checkpoint exists if and only if the redb write transaction inserting
//!   its row committed; its files are written (temp file, fsync, rename, fsync
//!   of the directory) before that, so a committed checkpoint never refers to
//!   a file that a crash could lose.
//! - Retention keeps the newest `retain` committed checkpoints and deletes
//!   their rows before their files, so a crash in between leaves files
//!   without rows (swept by a later retention), never rows without files.
//! - Every blob carries its length and CRC-32; readers check both before the
//!   bytes are decoded, and a file that fails is reported as
//!   [`CheckpointError::Corrupt`] naming the checkpoint and the file.
//! - The store only deletes what it creates: `chk-<digits>` directories, the
//!   files under `shared/`, and `checkpoints.redb`.
//! - A damaged `checkpoints.redb` (truncated, garbage) is an error naming it,
//!   never a panic: every redb call runs inside `redb_guard::guarded`.
//!
//! `_metadata` encoding (checkpoints and savepoints alike): the magic bytes
//! `FLOECKPT`, the format version ([`CHECKPOINT_FORMAT_VERSION`]) as a `u32`
//! LE, the body length as a `u64` LE, the CRC-32 of the body as a `u32` LE,
//! then the body: the postcard bytes of [`CheckpointMetadata`].

// redb and postcard errors are mapped into `CheckpointError` at every call,
// which keeps the `Result`s small; the store is blocking I/O by design: call
// it from a blocking pool or an I/O arbiter, never on the data path.

use super::error::CheckpointError;
use super::format::{
    BlobRef, CHECKPOINT_FORMAT_VERSION, CheckpointMetadata, SnapshotId, SnapshotKind,
};
use super::redb_guard::guarded;
use redb::{Database, ReadableTable, TableDefinition, TableError};
use std::collections::{BTreeMap, HashSet};
use std::fmt::Display;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The magic bytes opening every `_metadata` file.
pub const METADATA_MAGIC: &[u8; 8] = b"FLOECKPT";
/// The name of the metadata file of a checkpoint or savepoint directory.
pub const METADATA_FILE: &str = "_metadata";
/// The name of the store's database file.
pub const DATABASE_FILE: &str = "checkpoints.redb";
/// The directory, relative to the store, of blobs shared across checkpoints.
pub const SHARED_DIR: &str = "shared";

const HEADER_LEN: usize = 8 + 4 + 8 + 4;

const CHECKPOINTS: TableDefinition<u64, &[u8]> = TableDefinition::new("checkpoints");
const COUNTERS: TableDefinition<&str, u64> = TableDefinition::new("counters");
const MAX_ID: &str = "max_id";

/// Where the blobs of one snapshot go: a checkpoint of a
/// [`CheckpointStore`] (see [`CheckpointStore::blob_sink`]) or a savepoint
/// ([`super::savepoint::SavepointWriter`]), so that the asynchronous part of
/// a snapshot writes its state without caring which.
pub trait BlobSink: Send + Sync {
    /// Writes `bytes` as the blob `name` (a relative `/`-separated path of
    /// plain components) durably and returns its reference.
    fn put(&self, name: &str, bytes: &[u8]) -> Result<BlobRef, CheckpointError>;
}

/// A checkpoint directory: completed checkpoints, their blobs and their index.
///
/// `Send + Sync`: share it in an [`Arc`] between the coordinator and the
/// subtasks' asynchronous snapshot parts. Commits are serialized internally.
pub struct CheckpointStore {
    root: PathBuf,
    db_path: PathBuf,
    db: Database,
    /// Serializes commit and retention.
    commit_lock: Mutex<()>,
    /// Shared blobs written by this instance and not yet referenced by a
    /// committed checkpoint: they may belong to a checkpoint in flight, so
    /// retention leaves them alone.
    pending_shared: Mutex<HashSet<String>>,
}

impl CheckpointStore {
    /// Opens the checkpoint directory `dir`, creating it and its database if
    /// missing.
    pub fn open(dir: &Path) -> Result<CheckpointStore, CheckpointError> {
        fs::create_dir_all(dir).map_err(|e| io_err("create", dir, e))?;
        let db_path = dir.join(DATABASE_FILE);
        let db = guarded(&db_path, || {
            Database::create(&db_path).map_err(|e| open_err(&db_path, e))
        })?;
        sync_dir(dir)?;
        let store = Self::with_db(dir, db_path, db);
        store.ensure_tables()?;
        Ok(store)
    }

    /// Opens an existing checkpoint directory (one holding
    /// `checkpoints.redb`) without writing to it; `NotFound` if it has no
    /// database. Fails while another process (a running job) has it open.
    pub fn open_existing(dir: &Path) -> Result<CheckpointStore, CheckpointError> {
        let db_path = dir.join(DATABASE_FILE);
        if !db_path.is_file() {
            return Err(CheckpointError::NotFound {
                path: dir.to_path_buf(),
            });
        }
        let db = guarded(&db_path, || {
            Database::open(&db_path).map_err(|e| open_err(&db_path, e))
        })?;
        // No write here: reading a store must not change it.
        Ok(Self::with_db(dir, db_path, db))
    }

    fn with_db(dir: &Path, db_path: PathBuf, db: Database) -> CheckpointStore {
        CheckpointStore {
            root: dir.to_path_buf(),
            db_path,
            db,
            commit_lock: Mutex::new(()),
            pending_shared: Mutex::new(HashSet::new()),
        }
    }

    fn ensure_tables(&self) -> Result<(), CheckpointError> {
        let err = |e: &dyn Display| db_err(&self.db_path, e);
        guarded(&self.db_path, || {
            let txn = self.db.begin_write().map_err(|e| err(&e))?;
            txn.open_table(CHECKPOINTS).map_err(|e| err(&e))?;
            txn.open_table(COUNTERS).map_err(|e| err(&e))?;
            txn.commit().map_err(|e| err(&e))
        })
    }

    /// The checkpoint directory: the base of every [`BlobRef::path`].
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of checkpoint `id` (`DIR/chk-<id>`).
    pub fn checkpoint_dir(&self, id: SnapshotId) -> PathBuf {
        self.root.join(chk_dir_name(id))
    }

    /// Writes `bytes` as `chk-<id>/<name>` (to a temp file in the same
    /// directory, fsync, rename) and returns its [`BlobRef`] (length and
    /// CRC-32). `name` is a relative `/`-separated path of plain components
    /// (no `.`, `..`, leading `.`, nor `_metadata`).
    pub fn write_blob(
        &self,
        id: SnapshotId,
        name: &str,
        bytes: &[u8],
    ) -> Result<BlobRef, CheckpointError> {
        check_blob_name(name, &id.to_string())?;
        let rel = format!("{}/{name}", chk_dir_name(id));
        write_blob_file(&self.root, rel, bytes)
    }

    /// Writes `bytes` as `shared/<name>`, a blob later checkpoints may
    /// reference too; same rules as [`CheckpointStore::write_blob`].
    /// Retention leaves it alone until a committed checkpoint references it
    /// (it may belong to a checkpoint in flight), then deletes it once no
    /// retained checkpoint does.
    pub fn write_shared_blob(&self, name: &str, bytes: &[u8]) -> Result<BlobRef, CheckpointError> {
        check_blob_name(name, SHARED_DIR)?;
        let rel = format!("{SHARED_DIR}/{name}");
        lock(&self.pending_shared).insert(rel.clone());
        write_blob_file(&self.root, rel, bytes)
    }

    /// A [`BlobSink`] writing the blobs of checkpoint `id`
    /// ([`CheckpointStore::write_blob`]).
    pub fn blob_sink(self: &Arc<Self>, id: SnapshotId) -> Arc<dyn BlobSink> {
        Arc::new(CheckpointBlobSink {
            store: Arc::clone(self),
            id,
        })
    }

    /// Completes checkpoint `meta.id`: writes `chk-<id>/_metadata`, then
    /// inserts the metadata into the database in one write transaction — the
    /// checkpoint exists if and only if that transaction committed.
    ///
    /// Then retention: keeps the newest `retain` (at least 1) committed
    /// checkpoints, deletes the rows of older ones and every file no retained
    /// checkpoint references (shared blobs referenced by a retained
    /// checkpoint survive; `chk-<id>` directories of checkpoints never
    /// committed and older than the newest committed one are removed too).
    /// Retention errors are logged, not returned, once the commit happened.
    ///
    /// Refuses a savepoint, a metadata of another format version, an id
    /// already committed and a blob that is missing or of another length.
    pub fn commit(&self, meta: &CheckpointMetadata, retain: usize) -> Result<(), CheckpointError> {
        let _guard = lock(&self.commit_lock);
        let id = meta.id;
        let failed = |message: String| CheckpointError::Failed {
            checkpoint: id,
            message,
        };
        if meta.kind != SnapshotKind::Checkpoint {
            return Err(failed(
                "a savepoint cannot be committed to the checkpoint store".into(),
            ));
        }
        if meta.version != CHECKPOINT_FORMAT_VERSION {
            return Err(failed(format!(
                "metadata has format version {}, expected {CHECKPOINT_FORMAT_VERSION}",
                meta.version
            )));
        }
        if self.get_row(id)?.is_some() {
            return Err(failed("already committed".into()));
        }
        for blob in meta.blobs() {
            let path = blob_path(&self.root, blob, &id.to_string())?;
            match fs::metadata(&path) {
                Ok(m) if m.is_file() && m.len() == blob.len => {}
                Ok(m) => {
                    return Err(failed(format!(
                        "blob '{}' has {} bytes, expected {}",
                        path.display(),
                        m.len(),
                        blob.len
                    )));
                }
                Err(e) => return Err(io_err("read", &path, e)),
            }
        }

        let encoded = encode_metadata(meta);
        let dir = self.checkpoint_dir(id);
        create_dir_durably(&self.root, &dir)?;
        write_file_atomic(&dir.join(METADATA_FILE), &encoded)?;

        let err = |e: &dyn Display| db_err(&self.db_path, e);
        guarded(&self.db_path, || {
            let txn = self.db.begin_write().map_err(|e| err(&e))?;
            {
                let mut table = txn.open_table(CHECKPOINTS).map_err(|e| err(&e))?;
                table.insert(id, encoded.as_slice()).map_err(|e| err(&e))?;
                let mut counters = txn.open_table(COUNTERS).map_err(|e| err(&e))?;
                let max = counters
                    .get(MAX_ID)
                    .map_err(|e| err(&e))?
                    .map_or(0, |v| v.value());
                counters.insert(MAX_ID, max.max(id)).map_err(|e| err(&e))?;
            }
            txn.commit().map_err(|e| err(&e))
        })?;

        {
            let mut pending = lock(&self.pending_shared);
            for blob in meta.blobs() {
                pending.remove(&blob.path);
            }
        }
        if let Err(e) = self.retain(retain.max(1)) {
            tracing::warn!(checkpoint = id, error = %e, "checkpoint retention failed");
        }
        Ok(())
    }

    /// Keeps the newest `retain` committed checkpoints, deleting the rows and
    /// the files of the others (see [`CheckpointStore::commit`]).
    fn retain(&self, retain: usize) -> Result<(), CheckpointError> {
        let committed = self.rows()?;
        let cut = committed.len().saturating_sub(retain);
        let dropped: Vec<SnapshotId> = committed.keys().take(cut).copied().collect();
        if !dropped.is_empty() {
            let err = |e: &dyn Display| db_err(&self.db_path, e);
            guarded(&self.db_path, || {
                let txn = self.db.begin_write().map_err(|e| err(&e))?;
                {
                    let mut table = txn.open_table(CHECKPOINTS).map_err(|e| err(&e))?;
                    for id in &dropped {
                        table.remove(*id).map_err(|e| err(&e))?;
                    }
                }
                txn.commit().map_err(|e| err(&e))
            })?;
        }

        let mut retained_ids = HashSet::new();
        let mut referenced = HashSet::new();
        for (id, encoded) in committed.iter().skip(cut) {
            retained_ids.insert(*id);
            let meta = decode_metadata(encoded, &id.to_string(), &self.db_path)?;
            referenced.extend(meta.blobs().into_iter().map(|b| b.path.clone()));
        }
        let Some(&newest) = committed.keys().next_back() else {
            return Ok(());
        };

        let mut first_error = None;
        let mut note = |r: Result<(), CheckpointError>| {
            if let Err(e) = r {
                tracing::warn!(error = %e, "checkpoint retention: cannot remove a file");
                first_error.get_or_insert(e);
            }
        };
        let entries = fs::read_dir(&self.root).map_err(|e| io_err("read", &self.root, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| io_err("read", &self.root, e))?;
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(parse_chk_dir_name) else {
                continue;
            };
            // Newer ones are in flight; retained ones stay whole.
            if id >= newest || retained_ids.contains(&id) {
                continue;
            }
            let prefix = format!("{}/", chk_dir_name(id));
            if referenced.iter().any(|p| p.starts_with(&prefix)) {
                // A retained checkpoint still reads some of its files.
                note(sweep(
                    &self.root,
                    &entry.path(),
                    &referenced,
                    &HashSet::new(),
                ));
            } else {
                note(remove_dir_all(&entry.path()));
            }
        }
        let shared = self.root.join(SHARED_DIR);
        if shared.is_dir() {
            let pending = lock(&self.pending_shared).clone();
            note(sweep(&self.root, &shared, &referenced, &pending));
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Removes the files of checkpoint `id`, aborted (never committed).
    /// Ignores missing files; does nothing to a committed checkpoint.
    pub fn discard(&self, id: SnapshotId) {
        match self.get_row(id) {
            Ok(None) => {}
            Ok(Some(_)) => {
                tracing::warn!(checkpoint = id, "not discarding a committed checkpoint");
                return;
            }
            Err(e) => {
                tracing::warn!(checkpoint = id, error = %e, "cannot discard checkpoint");
                return;
            }
        }
        if let Err(e) = remove_dir_all(&self.checkpoint_dir(id)) {
            tracing::warn!(checkpoint = id, error = %e, "cannot discard checkpoint");
        }
    }

    /// The committed checkpoints, oldest first (reads the database only).
    pub fn list(&self) -> Result<Vec<CheckpointMetadata>, CheckpointError> {
        self.rows()?
            .iter()
            .map(|(id, encoded)| decode_metadata(encoded, &id.to_string(), &self.db_path))
            .collect()
    }

    /// The committed checkpoint `id` as recorded in the database, if any.
    pub fn get(&self, id: SnapshotId) -> Result<Option<CheckpointMetadata>, CheckpointError> {
        self.get_row(id)?
            .map(|encoded| decode_metadata(&encoded, &id.to_string(), &self.db_path))
            .transpose()
    }

    fn rows(&self) -> Result<BTreeMap<SnapshotId, Vec<u8>>, CheckpointError> {
        let err = |e: &dyn Display| db_err(&self.db_path, e);
        guarded(&self.db_path, || {
            let txn = self.db.begin_read().map_err(|e| err(&e))?;
            let table = match txn.open_table(CHECKPOINTS) {
                Ok(t) => t,
                Err(TableError::TableDoesNotExist(_)) => return Ok(BTreeMap::new()),
                Err(e) => return Err(err(&e)),
            };
            let mut out = BTreeMap::new();
            for row in table.iter().map_err(|e| err(&e))? {
                let (k, v) = row.map_err(|e| err(&e))?;
                out.insert(k.value(), v.value().to_vec());
            }
            Ok(out)
        })
    }

    fn get_row(&self, id: SnapshotId) -> Result<Option<Vec<u8>>, CheckpointError> {
        let err = |e: &dyn Display| db_err(&self.db_path, e);
        guarded(&self.db_path, || {
            let txn = self.db.begin_read().map_err(|e| err(&e))?;
            let table = match txn.open_table(CHECKPOINTS) {
                Ok(t) => t,
                Err(TableError::TableDoesNotExist(_)) => return Ok(None),
                Err(e) => return Err(err(&e)),
            };
            let row = table.get(id).map_err(|e| err(&e))?;
            Ok(row.map(|v| v.value().to_vec()))
        })
    }

    /// Verifies committed checkpoint `id`: its `_metadata` decodes and matches
    /// the database, and every blob exists with the recorded length and
    /// checksum. `Err(Corrupt { checkpoint: id, file, reason })` on the first
    /// fault; `NotFound` if `id` is not committed.
    pub fn verify(&self, id: SnapshotId) -> Result<(), CheckpointError> {
        self.verified_metadata(id).map(drop)
    }

    /// [`CheckpointStore::verify`], returning the verified metadata.
    pub fn verified_metadata(&self, id: SnapshotId) -> Result<CheckpointMetadata, CheckpointError> {
        let label = id.to_string();
        let Some(row) = self.get_row(id)? else {
            return Err(CheckpointError::NotFound {
                path: self.checkpoint_dir(id),
            });
        };
        let file = self.checkpoint_dir(id).join(METADATA_FILE);
        let meta = read_metadata_file(&file, &label)?;
        if meta != decode_metadata(&row, &label, &self.db_path)? {
            return Err(corrupt(
                &label,
                &file,
                "differs from the checkpoint recorded in the database",
            ));
        }
        verify_blobs(&self.root, &meta, &label)?;
        Ok(meta)
    }

    /// Reads a blob of checkpoint `id` (named in errors), checking its length
    /// and checksum.
    pub fn read_blob(&self, id: SnapshotId, blob: &BlobRef) -> Result<Vec<u8>, CheckpointError> {
        read_blob_checked(&self.root, blob, &id.to_string())
    }

    /// Deletes every checkpoint: the rows (one write transaction), then the
    /// `chk-<id>` directories and `shared/`, in flight ones included. The
    /// store stays usable and keeps its [`CheckpointStore::max_id`]. For a
    /// store shared in an [`Arc`], where [`CheckpointStore::remove_all`]
    /// cannot take it. Never removes files it did not create.
    pub fn clear(&self) -> Result<(), CheckpointError> {
        let _guard = lock(&self.commit_lock);
        let err = |e: &dyn Display| db_err(&self.db_path, e);
        guarded(&self.db_path, || {
            let txn = self.db.begin_write().map_err(|e| err(&e))?;
            {
                let mut table = txn.open_table(CHECKPOINTS).map_err(|e| err(&e))?;
                table.retain(|_, _| false).map_err(|e| err(&e))?;
            }
            txn.commit().map_err(|e| err(&e))
        })?;
        lock(&self.pending_shared).clear();
        let entries = fs::read_dir(&self.root).map_err(|e| io_err("read", &self.root, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| io_err("read", &self.root, e))?;
            let name = entry.file_name();
            let name = name.to_str().unwrap_or_default();
            if parse_chk_dir_name(name).is_some() || name == SHARED_DIR {
                remove_dir_all(&entry.path())?;
            }
        }
        Ok(())
    }

    /// Deletes every checkpoint, the database and the directory's other floe
    /// files (externalized retention "delete" on cancel), then the directory
    /// itself if nothing else is left in it. Never removes files it did not
    /// create.
    pub fn remove_all(self) -> Result<(), CheckpointError> {
        self.clear()?;
        let CheckpointStore {
            root, db_path, db, ..
        } = self;
        drop(db);
        match fs::remove_file(&db_path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("remove", &db_path, e)),
        }
        // Only if empty: whatever else is there is not ours.
        let _ = fs::remove_dir(&root);
        Ok(())
    }

    /// The highest id ever committed (0 if none), so that a restored job
    /// continues numbering after it.
    pub fn max_id(&self) -> Result<SnapshotId, CheckpointError> {
        let err = |e: &dyn Display| db_err(&self.db_path, e);
        guarded(&self.db_path, || {
            let txn = self.db.begin_read().map_err(|e| err(&e))?;
            let counters = match txn.open_table(COUNTERS) {
                Ok(t) => t,
                Err(TableError::TableDoesNotExist(_)) => return Ok(0),
                Err(e) => return Err(err(&e)),
            };
            let max = counters.get(MAX_ID).map_err(|e| err(&e))?;
            Ok(max.map_or(0, |v| v.value()))
        })
    }
}

impl std::fmt::Debug for CheckpointStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckpointStore")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

/// The [`BlobSink`] of one checkpoint of a store.
struct CheckpointBlobSink {
    store: Arc<CheckpointStore>,
    id: SnapshotId,
}

impl BlobSink for CheckpointBlobSink {
    fn put(&self, name: &str, bytes: &[u8]) -> Result<BlobRef, CheckpointError> {
        self.store.write_blob(self.id, name, bytes)
    }
}

/// Encodes `meta` as a `_metadata` file (see the module documentation).
pub fn encode_metadata(meta: &CheckpointMetadata) -> Vec<u8> {
    let body = postcard::to_stdvec(meta).expect("postcard serializes plain data into a Vec");
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.extend_from_slice(METADATA_MAGIC);
    out.extend_from_slice(&CHECKPOINT_FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// Decodes a `_metadata` file's bytes: checks the magic, the version
/// (`Version`), the length (truncated: `Corrupt`) and the checksum
/// (`Corrupt`). `checkpoint` and `file` name the snapshot in errors.
pub fn decode_metadata(
    bytes: &[u8],
    checkpoint: &str,
    file: &Path,
) -> Result<CheckpointMetadata, CheckpointError> {
    let bad = |reason: String| corrupt(checkpoint, file, reason);
    if bytes.len() < METADATA_MAGIC.len() || &bytes[..METADATA_MAGIC.len()] != METADATA_MAGIC {
        return Err(bad("not a floe checkpoint metadata file (bad magic)".into()));
    }
    if bytes.len() < HEADER_LEN {
        return Err(bad(format!(
            "truncated: {} bytes, shorter than the header",
            bytes.len()
        )));
    }
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let version = u32_at(8);
    if version != CHECKPOINT_FORMAT_VERSION {
        return Err(CheckpointError::Version {
            checkpoint: checkpoint.to_string(),
            found: version,
            expected: CHECKPOINT_FORMAT_VERSION,
        });
    }
    let len = u64::from_le_bytes(bytes[12..20].try_into().expect("8 bytes"));
    let checksum = u32_at(20);
    let body = &bytes[HEADER_LEN..];
    if body.len() as u64 != len {
        let what = if (body.len() as u64) < len {
            "truncated"
        } else {
            "trailing bytes"
        };
        return Err(bad(format!(
            "{what}: body has {} bytes, header says {len}",
            body.len()
        )));
    }
    let actual = crc32fast::hash(body);
    if actual != checksum {
        return Err(bad(format!(
            "checksum mismatch: {actual:08x}, expected {checksum:08x}"
        )));
    }
    let meta: CheckpointMetadata =
        postcard::from_bytes(body).map_err(|e| bad(format!("cannot decode: {e}")))?;
    if meta.version != CHECKPOINT_FORMAT_VERSION {
        return Err(CheckpointError::Version {
            checkpoint: checkpoint.to_string(),
            found: meta.version,
            expected: CHECKPOINT_FORMAT_VERSION,
        });
    }
    Ok(meta)
}

/// Reads and decodes the `_metadata` file `file`.
pub(crate) fn read_metadata_file(
    file: &Path,
    checkpoint: &str,
) -> Result<CheckpointMetadata, CheckpointError> {
    let bytes = match fs::read(file) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(corrupt(checkpoint, file, "missing"));
        }
        Err(e) => return Err(io_err("read", file, e)),
    };
    decode_metadata(&bytes, checkpoint, file)
}

/// Checks every blob of `meta` under `root` (length and checksum).
pub(crate) fn verify_blobs(
    root: &Path,
    meta: &CheckpointMetadata,
    checkpoint: &str,
) -> Result<(), CheckpointError> {
    for blob in meta.blobs() {
        read_blob_checked(root, blob, checkpoint)?;
    }
    Ok(())
}

/// Reads `blob` under `root`, checking its length and checksum;
/// `checkpoint` names the snapshot in errors.
pub(crate) fn read_blob_checked(
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
fn blob_path(root: &Path, blob: &BlobRef, checkpoint: &str) -> Result<PathBuf, CheckpointError> {
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

fn check_blob_name(name: &str, checkpoint: &str) -> Result<(), CheckpointError> {
    let ok = is_plain_relative(name)
        && name.split('/').all(|c| !c.starts_with('.'))
        && name != METADATA_FILE;
    if ok {
        Ok(())
    } else {
        Err(CheckpointError::Io {
            action: "name",
            path: PathBuf::from(name),
            message: format!(
                "invalid blob name for {checkpoint}: use `/`-separated plain components, \
                 not starting with '.', other than `{METADATA_FILE}`"
            ),
        })
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
fn sweep(
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

fn remove_dir_all(dir: &Path) -> Result<(), CheckpointError> {
    match fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("remove", dir, e)),
    }
}

/// `chk-<id>`.
pub(crate) fn chk_dir_name(id: SnapshotId) -> String {
    format!("chk-{id}")
}

/// The id of a `chk-<digits>` directory name.
pub(crate) fn parse_chk_dir_name(name: &str) -> Option<SnapshotId> {
    let digits = name.strip_prefix("chk-")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

pub(crate) fn io_err(action: &'static str, path: &Path, e: std::io::Error) -> CheckpointError {
    CheckpointError::Io {
        action,
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// An error opening the database file `path`: another process holds it, or
/// the file is damaged or not a checkpoint database.
fn open_err(path: &Path, e: redb::DatabaseError) -> CheckpointError {
    let message = match e {
        redb::DatabaseError::DatabaseAlreadyOpen => {
            "in use by another process (a running job holds it)".to_string()
        }
        e => format!("damaged or not a checkpoint database: {e}"),
    };
    CheckpointError::Database {
        path: path.to_path_buf(),
        message,
    }
}

fn db_err(path: &Path, e: impl Display) -> CheckpointError {
    CheckpointError::Database {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

pub(crate) fn corrupt(checkpoint: &str, file: &Path, reason: impl Into<String>) -> CheckpointError {
    CheckpointError::Corrupt {
        checkpoint: checkpoint.to_string(),
        file: file.to_path_buf(),
        reason: reason.into(),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chk_dir_names_round_trip() {
        assert_eq!(parse_chk_dir_name(&chk_dir_name(42)), Some(42));
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
