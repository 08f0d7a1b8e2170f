//! The database file of a backend: creating it, committing flushes to it and
//! recording the rows each flush changes (for incremental snapshots).

use super::{
    Changes, CreateError, DB_CACHE_BYTES, RedbStateBackend, RedbStore, TakenChanges, storage,
};
use crate::state::error::BoxError;
use crate::state::error::StateError;
use redb::backends::FileBackend;
use redb::{Builder, Durability, ReadTransaction, StorageBackend, WriteTransaction};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// The database file, never synced: it is working storage, deleted with the
/// backend and never reopened (recovery goes through snapshots), so the
/// `fdatasync` redb issues at its durable commits (every 8th flush, which
/// lets it reuse freed pages) would only cost time.
#[derive(Debug)]
struct WorkingFile(FileBackend);

impl StorageBackend for WorkingFile {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.0.len()
    }

    fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>, std::io::Error> {
        self.0.read(offset, len)
    }

    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.0.set_len(len)
    }

    fn sync_data(&self, _eventual: bool) -> Result<(), std::io::Error> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.0.write(offset, data)
    }
}

impl RedbStore {
    pub(super) fn create(operator: &str, path: PathBuf) -> Result<Self, StateError> {
        let fail = |source: BoxError| {
            storage(
                operator,
                CreateError {
                    path: path.clone(),
                    source,
                },
            )
        };
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(fail(e.into())),
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| fail(e.into()))?;
        let file = FileBackend::new(file).map_err(|e| fail(e.into()))?;
        let db = Builder::new()
            .set_cache_size(DB_CACHE_BYTES)
            .create_with_backend(WorkingFile(file))
            .map_err(|e| fail(e.into()))?;
        Ok(RedbStore {
            operator: operator.to_string(),
            path,
            db,
            cache_entries: AtomicUsize::new(RedbStateBackend::<()>::DEFAULT_CACHE_ENTRIES),
            changes: Mutex::new(Changes::default()),
            commits: AtomicU64::new(0),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` in a write transaction and commits it (never with fsync: the
    /// database is working storage).
    pub(super) fn write<R>(
        &self,
        f: impl FnOnce(&WriteTransaction) -> Result<R, redb::Error>,
    ) -> Result<R, StateError> {
        let err = |e: BoxError| storage(&self.operator, e);
        let mut txn = self.db.begin_write().map_err(|e| err(e.into()))?;
        // redb frees the pages a commit replaced only at a durable commit:
        // every 8th is one (written, never synced: `WorkingFile`), the
        // others skip the header write.
        let n = self.commits.fetch_add(1, Ordering::Relaxed);
        txn.set_durability(if n % 8 == 7 {
            Durability::Eventual
        } else {
            Durability::None
        });
        let r = f(&txn).map_err(|e| err(e.into()))?;
        txn.commit().map_err(|e| err(e.into()))?;
        Ok(r)
    }

    pub(super) fn read(&self) -> Result<ReadTransaction, StateError> {
        self.db.begin_read().map_err(|e| storage(&self.operator, e))
    }

    fn changes(&self) -> MutexGuard<'_, Changes> {
        self.changes.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn recording(&self) -> bool {
        let c = self.changes();
        c.on && !c.overflowed
    }

    /// Records the row keys of `state` that a flush wrote or removed.
    pub(super) fn record(&self, state: &str, rows: impl IntoIterator<Item = Box<[u8]>>) {
        let mut guard = self.changes();
        let c = &mut *guard;
        if !c.on || c.overflowed {
            return;
        }
        let set = match c.by_state.get_mut(state) {
            Some(s) => s,
            None => c.by_state.entry(state.to_string()).or_default(),
        };
        for r in rows {
            if set.insert(r) {
                c.count += 1;
            }
        }
        if c.count > c.limit {
            c.overflowed = true;
            c.by_state.clear();
            c.count = 0;
        }
    }

    /// Takes the record of the changes since the previous snapshot and
    /// starts a new one, holding at most `limit` keys.
    pub(super) fn take_changes(&self, limit: usize) -> TakenChanges {
        let mut c = self.changes();
        let taken = TakenChanges {
            by_state: std::mem::take(&mut c.by_state),
            count: c.count,
            complete: c.on && !c.overflowed,
        };
        c.on = true;
        c.overflowed = false;
        c.count = 0;
        c.limit = limit;
        taken
    }

    /// Stops recording (after a restore: the next snapshot is full).
    pub(super) fn reset_changes(&self) {
        *self.changes() = Changes::default();
    }
}

impl Drop for RedbStore {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
