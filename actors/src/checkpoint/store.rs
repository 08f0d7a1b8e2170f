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
use super::files::{
    blob_path, check_blob_name, chk_dir_name, corrupt, create_dir_durably, db_err, io_err, lock,
    open_err, parse_chk_dir_name, read_blob_checked, remove_dir_all, sweep, sync_dir,
    write_blob_file, write_file_atomic,
};
use super::format::{BlobRef, CheckpointMetadata};
use super::metadata::{read_metadata_file, verify_blobs};
use super::redb_guard::guarded;
use super::storage::{BlobSink, CheckpointStorage};
use crate::ids::CheckpointId;
use redb::{Database, ReadableTable, TableDefinition, TableError};
use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The name of the metadata file of a checkpoint or savepoint directory.
pub use super::files::METADATA_FILE;
/// The magic bytes opening every `_metadata` file.
pub use super::metadata::{METADATA_MAGIC, decode_metadata, encode_metadata};
/// The name of the store's database file.
pub const DATABASE_FILE: &str = "checkpoints.redb";
/// The directory, relative to the store, of blobs shared across checkpoints.
pub use super::files::SHARED_DIR;

const CHECKPOINTS: TableDefinition<u64, &[u8]> = TableDefinition::new("checkpoints");
const COUNTERS: TableDefinition<&str, u64> = TableDefinition::new("counters");
const MAX_ID: &str = "max_id";

/// A checkpoint directory: completed checkpoints, their blobs and their index.
///
/// `Send + Sync`: share it in an [`Arc`](std::sync::Arc) between the coordinator and the
/// subtasks' asynchronous snapshot parts. Commits are serialized internally.
pub struct CheckpointStore {
    root: PathBuf,
    db_path: PathBuf,
    db: Database,
    /// Serializes commit and retention.
    commit_lock: Mutex<()>,
    /// The database file's identity when opened: a commit checks that the
    /// file is still there, so a checkpoint directory deleted or replaced
    /// while the job runs fails its checkpoints loudly instead of writing
    /// into a database no one will find.
    db_identity: Option<FileIdentity>,
    /// Shared blobs written by this instance and not yet referenced by a
    /// committed checkpoint: they may belong to a checkpoint in flight, so
    /// retention leaves them alone.
    pending_shared: Mutex<HashSet<String>>,
}

/// Which file a path names (device and inode on Unix; existence
/// elsewhere); `None` when there is none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileIdentity(u64, u64);

fn file_identity(path: &Path) -> Option<FileIdentity> {
    let meta = fs::metadata(path).ok()?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        Some(FileIdentity(meta.dev(), meta.ino()))
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        Some(FileIdentity(0, 0))
    }
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
            db_identity: file_identity(&db_path),
            db_path,
            db,
            commit_lock: Mutex::new(()),
            pending_shared: Mutex::new(HashSet::new()),
        }
    }

    fn ensure_tables(&self) -> Result<(), CheckpointError> {
        guarded(&self.db_path, || {
            let txn = self
                .db
                .begin_write()
                .map_err(|e| db_err(&self.db_path, e))?;
            txn.open_table(CHECKPOINTS)
                .map_err(|e| db_err(&self.db_path, e))?;
            txn.open_table(COUNTERS)
                .map_err(|e| db_err(&self.db_path, e))?;
            txn.commit().map_err(|e| db_err(&self.db_path, e))
        })
    }

    /// The checkpoint directory: the base of every [`BlobRef::path`].
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of checkpoint `id` (`DIR/chk-<id>`).
    pub fn checkpoint_dir(&self, id: CheckpointId) -> PathBuf {
        self.root.join(chk_dir_name(id))
    }

    /// Writes `bytes` as `chk-<id>/<name>` (to a temp file in the same
    /// directory, fsync, rename) and returns its [`BlobRef`] (length and
    /// CRC-32). `name` is a relative `/`-separated path of plain components
    /// (no `.`, `..`, leading `.`, nor `_metadata`).
    pub fn write_blob(
        &self,
        id: CheckpointId,
        name: &str,
        bytes: &[u8],
    ) -> Result<BlobRef, CheckpointError> {
        check_blob_name(name, &id.0.to_string())?;
        let rel = format!("{}/{name}", chk_dir_name(id));
        // A write that failed because the directory went away says so, as
        // the commit would.
        write_blob_file(&self.root, rel, bytes).map_err(|e| match self.check_still_there(id) {
            Ok(()) => e,
            Err(gone) => gone,
        })
    }

    /// Err (logged once here, as an error) when the checkpoint directory
    /// was deleted or replaced since the store opened it: checkpoint `id`
    /// cannot be stored, and what it would hold would be found by no one.
    fn check_still_there(&self, id: CheckpointId) -> Result<(), CheckpointError> {
        if self.db_identity.is_none() || file_identity(&self.db_path) == self.db_identity {
            return Ok(());
        }
        let message = format!(
            "the checkpoint directory '{}' was deleted or replaced while the job ran \
             (its database '{}' is gone): checkpoint {} is not stored",
            self.root.display(),
            self.db_path.display(),
            id.0
        );
        tracing::error!("{message}");
        Err(CheckpointError::Failed {
            checkpoint: id,
            message,
        })
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
        super::metadata::check_committable(meta)?;
        self.check_still_there(id)?;
        if self.get_row(id)?.is_some() {
            return Err(failed("already committed".into()));
        }
        for blob in meta.blobs() {
            let path = blob_path(&self.root, blob, &id.0.to_string())?;
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

        guarded(&self.db_path, || {
            let txn = self
                .db
                .begin_write()
                .map_err(|e| db_err(&self.db_path, e))?;
            {
                let mut table = txn
                    .open_table(CHECKPOINTS)
                    .map_err(|e| db_err(&self.db_path, e))?;
                table
                    .insert(id.0, encoded.as_slice())
                    .map_err(|e| db_err(&self.db_path, e))?;
                let mut counters = txn
                    .open_table(COUNTERS)
                    .map_err(|e| db_err(&self.db_path, e))?;
                let max = counters
                    .get(MAX_ID)
                    .map_err(|e| db_err(&self.db_path, e))?
                    .map_or(0, |v| v.value());
                counters
                    .insert(MAX_ID, max.max(id.0))
                    .map_err(|e| db_err(&self.db_path, e))?;
            }
            txn.commit().map_err(|e| db_err(&self.db_path, e))
        })?;

        {
            let mut pending = lock(&self.pending_shared);
            for blob in meta.blobs() {
                pending.remove(&blob.path);
            }
        }
        if let Err(e) = self.retain(retain.max(1)) {
            tracing::warn!(checkpoint = id.0, error = %e, "checkpoint retention failed");
        }
        Ok(())
    }

    /// Keeps the newest `retain` committed checkpoints, deleting the rows and
    /// the files of the others (see [`CheckpointStore::commit`]).
    fn retain(&self, retain: usize) -> Result<(), CheckpointError> {
        let committed = self.rows()?;
        let cut = committed.len().saturating_sub(retain);
        let dropped: Vec<u64> = committed.keys().take(cut).copied().collect();
        if !dropped.is_empty() {
            guarded(&self.db_path, || {
                let txn = self
                    .db
                    .begin_write()
                    .map_err(|e| db_err(&self.db_path, e))?;
                {
                    let mut table = txn
                        .open_table(CHECKPOINTS)
                        .map_err(|e| db_err(&self.db_path, e))?;
                    for id in &dropped {
                        table.remove(*id).map_err(|e| db_err(&self.db_path, e))?;
                    }
                }
                txn.commit().map_err(|e| db_err(&self.db_path, e))
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
            if id.0 >= newest || retained_ids.contains(&id.0) {
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
    pub fn discard(&self, id: CheckpointId) {
        match self.get_row(id) {
            Ok(None) => {}
            Ok(Some(_)) => {
                tracing::warn!(checkpoint = id.0, "not discarding a committed checkpoint");
                return;
            }
            Err(e) => {
                tracing::warn!(checkpoint = id.0, error = %e, "cannot discard checkpoint");
                return;
            }
        }
        if let Err(e) = remove_dir_all(&self.checkpoint_dir(id)) {
            tracing::warn!(checkpoint = id.0, error = %e, "cannot discard checkpoint");
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
    pub fn get(&self, id: CheckpointId) -> Result<Option<CheckpointMetadata>, CheckpointError> {
        self.get_row(id)?
            .map(|encoded| decode_metadata(&encoded, &id.0.to_string(), &self.db_path))
            .transpose()
    }

    fn rows(&self) -> Result<BTreeMap<u64, Vec<u8>>, CheckpointError> {
        guarded(&self.db_path, || {
            let txn = self.db.begin_read().map_err(|e| db_err(&self.db_path, e))?;
            let table = match txn.open_table(CHECKPOINTS) {
                Ok(t) => t,
                Err(TableError::TableDoesNotExist(_)) => return Ok(BTreeMap::new()),
                Err(e) => return Err(db_err(&self.db_path, e)),
            };
            let mut out = BTreeMap::new();
            for row in table.iter().map_err(|e| db_err(&self.db_path, e))? {
                let (k, v) = row.map_err(|e| db_err(&self.db_path, e))?;
                out.insert(k.value(), v.value().to_vec());
            }
            Ok(out)
        })
    }

    fn get_row(&self, id: CheckpointId) -> Result<Option<Vec<u8>>, CheckpointError> {
        guarded(&self.db_path, || {
            let txn = self.db.begin_read().map_err(|e| db_err(&self.db_path, e))?;
            let table = match txn.open_table(CHECKPOINTS) {
                Ok(t) => t,
                Err(TableError::TableDoesNotExist(_)) => return Ok(None),
                Err(e) => return Err(db_err(&self.db_path, e)),
            };
            let row = table.get(id.0).map_err(|e| db_err(&self.db_path, e))?;
            Ok(row.map(|v| v.value().to_vec()))
        })
    }

    /// Verifies committed checkpoint `id`: its `_metadata` decodes and matches
    /// the database, and every blob exists with the recorded length and
    /// checksum. `Err(Corrupt { checkpoint: id, file, reason })` on the first
    /// fault; `NotFound` if `id` is not committed.
    pub fn verify(&self, id: CheckpointId) -> Result<(), CheckpointError> {
        self.verified_metadata(id).map(drop)
    }

    /// [`CheckpointStore::verify`], returning the verified metadata.
    pub fn verified_metadata(
        &self,
        id: CheckpointId,
    ) -> Result<CheckpointMetadata, CheckpointError> {
        let label = id.0.to_string();
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
    pub fn read_blob(&self, id: CheckpointId, blob: &BlobRef) -> Result<Vec<u8>, CheckpointError> {
        read_blob_checked(&self.root, blob, &id.0.to_string())
    }

    /// Deletes every checkpoint: the rows (one write transaction), then the
    /// `chk-<id>` directories and `shared/`, in flight ones included. The
    /// store stays usable and keeps its [`CheckpointStore::max_id`]. For a
    /// store shared in an [`Arc`](std::sync::Arc), where [`CheckpointStore::remove_all`]
    /// cannot take it. Never removes files it did not create.
    pub fn clear(&self) -> Result<(), CheckpointError> {
        let _guard = lock(&self.commit_lock);
        guarded(&self.db_path, || {
            let txn = self
                .db
                .begin_write()
                .map_err(|e| db_err(&self.db_path, e))?;
            {
                let mut table = txn
                    .open_table(CHECKPOINTS)
                    .map_err(|e| db_err(&self.db_path, e))?;
                table
                    .retain(|_, _| false)
                    .map_err(|e| db_err(&self.db_path, e))?;
            }
            txn.commit().map_err(|e| db_err(&self.db_path, e))
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
    pub fn max_id(&self) -> Result<CheckpointId, CheckpointError> {
        guarded(&self.db_path, || {
            let txn = self.db.begin_read().map_err(|e| db_err(&self.db_path, e))?;
            let counters = match txn.open_table(COUNTERS) {
                Ok(t) => t,
                Err(TableError::TableDoesNotExist(_)) => return Ok(CheckpointId(0)),
                Err(e) => return Err(db_err(&self.db_path, e)),
            };
            let max = counters.get(MAX_ID).map_err(|e| db_err(&self.db_path, e))?;
            Ok(CheckpointId(max.map_or(0, |v| v.value())))
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

impl BlobSink for CheckpointStore {
    fn put(
        &self,
        checkpoint: CheckpointId,
        name: &str,
        bytes: &[u8],
    ) -> Result<BlobRef, CheckpointError> {
        self.write_blob(checkpoint, name, bytes)
    }
}

impl CheckpointStorage for CheckpointStore {
    fn write_shared_blob(&self, name: &str, bytes: &[u8]) -> Result<BlobRef, CheckpointError> {
        CheckpointStore::write_shared_blob(self, name, bytes)
    }
    fn commit(&self, meta: &CheckpointMetadata, retain: usize) -> Result<(), CheckpointError> {
        CheckpointStore::commit(self, meta, retain)
    }
    fn discard(&self, id: CheckpointId) {
        CheckpointStore::discard(self, id)
    }
    fn list(&self) -> Result<Vec<CheckpointMetadata>, CheckpointError> {
        CheckpointStore::list(self)
    }
    fn get(&self, id: CheckpointId) -> Result<Option<CheckpointMetadata>, CheckpointError> {
        CheckpointStore::get(self, id)
    }
    fn verified_metadata(&self, id: CheckpointId) -> Result<CheckpointMetadata, CheckpointError> {
        CheckpointStore::verified_metadata(self, id)
    }
    fn read_blob(&self, id: CheckpointId, blob: &BlobRef) -> Result<Vec<u8>, CheckpointError> {
        CheckpointStore::read_blob(self, id, blob)
    }
    fn clear(&self) -> Result<(), CheckpointError> {
        CheckpointStore::clear(self)
    }
    fn max_id(&self) -> Result<CheckpointId, CheckpointError> {
        CheckpointStore::max_id(self)
    }
    fn location(&self) -> String {
        self.root.display().to_string()
    }
}
