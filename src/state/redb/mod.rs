//! The redb state backend: every state in an embedded redb database file per
//! subtask, behind a bounded in-memory cache per state.
//!
//! Layout: one redb table per registered state (named `state/<name>`); a row
//! key is the key group as a big-endian `u32` followed by the postcard bytes
//! of the key, so the rows of a key group are one contiguous range; a row
//! value is the TTL stamp as a big-endian `i64` followed by the postcard bytes
//! of the value (so expiry is checked without decoding the value).
//!
//! **Cache.** Each state keeps up to
//! [`cache_capacity`](RedbStateBackend::with_cache_capacity) entries in an
//! in-memory map of typed values (keys known to be absent included): a read
//! or write of a cached key costs a hash lookup, like the heap backend, and
//! no serialization. Written entries are dirty; they reach the database in
//! bulk — one write transaction, the table opened once, the rows in key
//! order — when an eighth of the cache is dirty (a write transaction holds
//! the pages it changes in memory), when the cache is full (then the older
//! half of the entries is evicted) and at every snapshot. A miss reads the row through a read-only
//! table of the last commit, held open between flushes. So state larger than
//! memory works: only the cache is in memory. TTL is checked on every access
//! of a cached entry, and the incremental sweep walks the cache per access
//! and the database rows at each flush (as many rows as the accesses since
//! the previous flush would have checked).
//!
//! **Snapshots.** The synchronous part flushes the caches, then opens a read
//! transaction, which is redb's MVCC view of the committed state:
//! [`Snapshot::serialize`] reads the key groups from it while processing goes
//! on. A full snapshot has the same [`KeyGroupBytes`] format as the heap
//! backend's, so a snapshot of either backend restores into either backend.
//!
//! **Incremental snapshots.** From the first snapshot on, each flush records
//! the row keys it wrote or removed. [`StateBackend::snapshot_for`] seals
//! those per snapshot; once a checkpoint's completion is reported
//! ([`StateBackend::notify_checkpoint_complete`]), the next snapshot may be a
//! delta against it: the rows changed since — present ones as entries,
//! absent ones as removed keys — read from the snapshot's read transaction,
//! per key group. A delta covers every change since the last *completed*
//! checkpoint, whatever happened to those in between. A snapshot is full when
//! there is no completed base, when a savepoint is taken, when the base's
//! chain already holds [`MAX_DELTAS`] deltas, when the changed keys of the
//! chain would exceed half the keys held, or when more keys changed than the
//! record holds (half the keys held, at least 65,536).
//!
//! The database is working storage, not a recovery mechanism: it is created
//! empty (an existing file at its path is replaced) and deleted when the
//! backend is dropped; recovery goes through snapshots.

// The transaction closures return `redb::Error` (large, but only on the
// failure path) so that `?` converts every redb error type.
#![allow(clippy::result_large_err)]

use super::descriptor::StateMeta;
use super::error::StateError;
use super::snapshot::{
    CapturedState, GroupDelta, KeyGroupBytes, PendingBlob, Snapshot, register_table, restore_into,
    sorted_pending,
};
use super::table::{KeyedTable, Stamped};
use super::ttl::{StateTtlConfig, TtlUpdateType};
use super::{StateBackend, StateKey, StateTable, StateValue};
use crate::time::{Clock, SystemClock};
use floe_actors::element::Timestamp;
use floe_actors::ids::CheckpointId;
use floe_actors::keygroup::key_group_range;
use indexmap::IndexMap;
use redb::{
    Builder, Database, Durability, ReadOnlyTable, ReadTransaction, ReadableTable,
    ReadableTableMetadata, TableDefinition, TableError, WriteTransaction,
};
use rustc_hash::{FxBuildHasher, FxHashMap, FxHashSet};
use std::any::{Any, TypeId};
use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::ops::{Bound, Range};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

type Def<'a> = TableDefinition<'a, &'static [u8], &'static [u8]>;
type Reader = ReadOnlyTable<&'static [u8], &'static [u8]>;

/// The most deltas a chain of incremental snapshots holds on top of its full
/// snapshot; the next snapshot is full.
pub const MAX_DELTAS: usize = 8;

/// redb's page cache per database (its default is 1 GiB).
const DB_CACHE_BYTES: usize = 8 << 20;

/// The fewest changed keys the change record holds before it gives up.
const MIN_CHANGE_LIMIT: usize = 1 << 16;

fn storage(operator: &str, e: impl std::fmt::Display) -> StateError {
    StateError::Storage {
        operator: operator.to_string(),
        message: e.to_string(),
    }
}

/// Row keys written or removed since the last snapshot, per state.
#[derive(Default)]
struct Changes {
    /// Recording (from the first snapshot on).
    on: bool,
    /// More keys changed than `limit`: the record is incomplete.
    overflowed: bool,
    count: usize,
    limit: usize,
    by_state: FxHashMap<String, FxHashSet<Box<[u8]>>>,
}

/// What a snapshot takes from the change record.
struct TakenChanges {
    by_state: FxHashMap<String, FxHashSet<Box<[u8]>>>,
    count: usize,
    /// Every change since the previous snapshot is in `by_state`.
    complete: bool,
}

/// The database of one [`RedbStateBackend`], shared by the backend's tables.
pub struct RedbStore {
    operator: String,
    path: PathBuf,
    db: Database,
    cache_entries: AtomicUsize,
    changes: Mutex<Changes>,
    commits: AtomicU64,
}

impl RedbStore {
    fn create(operator: &str, path: PathBuf) -> Result<Self, StateError> {
        let fail = |e: &dyn std::fmt::Display| {
            storage(
                operator,
                format!("cannot create state file {}: {e}", path.display()),
            )
        };
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(fail(&e)),
        }
        let db = Builder::new()
            .set_cache_size(DB_CACHE_BYTES)
            .create(&path)
            .map_err(|e| fail(&e))?;
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
    fn write<R>(
        &self,
        f: impl FnOnce(&WriteTransaction) -> Result<R, redb::Error>,
    ) -> Result<R, StateError> {
        let err = |e: &dyn std::fmt::Display| storage(&self.operator, e);
        let mut txn = self.db.begin_write().map_err(|e| err(&e))?;
        // redb frees the pages a commit replaced only at a durable commit:
        // every 8th is one (written, not fsynced), the others skip the
        // header write.
        let n = self.commits.fetch_add(1, Ordering::Relaxed);
        txn.set_durability(if n % 8 == 7 {
            Durability::Eventual
        } else {
            Durability::None
        });
        let r = f(&txn).map_err(|e| err(&e))?;
        txn.commit().map_err(|e| err(&e))?;
        Ok(r)
    }

    fn read(&self) -> Result<ReadTransaction, StateError> {
        self.db.begin_read().map_err(|e| storage(&self.operator, e))
    }

    fn changes(&self) -> MutexGuard<'_, Changes> {
        self.changes.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn recording(&self) -> bool {
        let c = self.changes();
        c.on && !c.overflowed
    }

    /// Records the row keys of `state` that a flush wrote or removed.
    fn record(&self, state: &str, rows: impl IntoIterator<Item = Box<[u8]>>) {
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
    fn take_changes(&self, limit: usize) -> TakenChanges {
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
    fn reset_changes(&self) {
        *self.changes() = Changes::default();
    }
}

impl Drop for RedbStore {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A cached entry: its key group, its value (`None`: absent) and whether it
/// differs from the database.
struct Slot<S> {
    key_group: u32,
    value: Option<Stamped<S>>,
    dirty: bool,
}

/// The most database rows one flush's TTL sweep checks.
const MAX_DB_SWEEP: usize = 1 << 20;

/// One state's rows in the redb database, typed, behind its cache.
pub(crate) struct RedbTable<K, S> {
    meta: StateMeta,
    operator: String,
    ttl: Option<StateTtlConfig>,
    range: Range<u32>,
    store: Arc<RedbStore>,
    name: String,
    cache: IndexMap<K, Slot<S>, FxBuildHasher>,
    capacity: usize,
    /// Indexes in `cache` of the dirty slots.
    dirty: Vec<usize>,
    /// The table as of the last commit (`None`: it does not exist).
    reader: Option<Reader>,
    /// Rows in the database as of the last commit.
    db_rows: u64,
    /// Over the cached keys: those with a value minus those with a row.
    delta_len: i64,
    /// Row key buffer for misses.
    scratch: Vec<u8>,
    /// The cache sweep's position.
    cursor: usize,
    /// The database sweep's position: the last row key checked.
    db_cursor: Vec<u8>,
    /// Rows the next flush's sweep checks.
    db_sweep: usize,
    /// The time of the last access (for the database sweep).
    last_now: Timestamp,
    _k: PhantomData<fn() -> K>,
}

fn encode_row<S: StateValue>(stamp: Timestamp, value: &S) -> Result<Vec<u8>, postcard::Error> {
    postcard::to_extend(value, stamp.to_be_bytes().to_vec())
}

fn row_stamp(row: &[u8]) -> Timestamp {
    let mut b = [0u8; 8];
    b.copy_from_slice(&row[..8]);
    i64::from_be_bytes(b)
}

impl<K: StateKey, S: StateValue> RedbTable<K, S> {
    pub(crate) fn new(
        meta: StateMeta,
        operator: &str,
        ttl: Option<StateTtlConfig>,
        range: Range<u32>,
        store: Arc<RedbStore>,
    ) -> Self {
        let capacity = store.cache_entries.load(Ordering::Relaxed).max(2);
        let mut table = RedbTable {
            name: format!("state/{}", meta.name),
            meta,
            operator: operator.to_string(),
            ttl,
            range,
            store,
            cache: IndexMap::default(),
            capacity,
            dirty: Vec::new(),
            reader: None,
            db_rows: 0,
            delta_len: 0,
            scratch: Vec::new(),
            cursor: 0,
            db_cursor: Vec::new(),
            db_sweep: 0,
            last_now: Timestamp::MIN,
            _k: PhantomData,
        };
        // A new table has no rows; a failure here shows at the first miss.
        let _ = table.open_reader();
        table
    }

    fn def(&self) -> Def<'_> {
        TableDefinition::new(&self.name)
    }

    fn serde(&self, e: impl std::fmt::Display) -> StateError {
        StateError::Serde {
            operator: self.operator.clone(),
            state: self.meta.name.clone(),
            message: e.to_string(),
        }
    }

    fn check(&self, key_group: u32) -> Result<(), StateError> {
        if self.range.contains(&key_group) {
            Ok(())
        } else {
            Err(StateError::KeyGroupOutOfRange {
                operator: self.operator.clone(),
                key_group,
                start: self.range.start,
                end: self.range.end,
            })
        }
    }

    fn expired(&self, stamp: Timestamp, now: Timestamp) -> bool {
        self.ttl
            .as_ref()
            .is_some_and(|t| stamp.saturating_add(t.ttl_ms()) <= now)
    }

    /// Reopens the read-only view of the table on the last commit.
    fn open_reader(&mut self) -> Result<(), StateError> {
        self.reader = None;
        self.db_rows = 0;
        let read = self.store.read()?;
        match read.open_table(self.def()) {
            Ok(t) => {
                self.db_rows = t.len().map_err(|e| storage(&self.operator, e))?;
                self.reader = Some(t);
                Ok(())
            }
            Err(TableError::TableDoesNotExist(_)) => Ok(()),
            Err(e) => Err(storage(&self.operator, e)),
        }
    }

    /// The row of `key` in the database as of the last flush.
    fn load(&mut self, key_group: u32, key: &K) -> Result<Option<Stamped<S>>, StateError> {
        if self.reader.is_none() {
            return Ok(None);
        }
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        buf.extend_from_slice(&key_group.to_be_bytes());
        self.scratch = postcard::to_extend(key, buf).map_err(|e| self.serde(e))?;
        let Some(reader) = &self.reader else {
            return Ok(None);
        };
        let found = reader
            .get(self.scratch.as_slice())
            .map_err(|e| storage(&self.operator, e))?;
        let Some(row) = found else {
            return Ok(None);
        };
        let bytes = row.value();
        let value: S = postcard::from_bytes(&bytes[8..]).map_err(|e| self.serde(e))?;
        Ok(Some(Stamped {
            value,
            stamp: row_stamp(bytes),
        }))
    }

    /// The cache index of `key`, read from the database on a miss (after
    /// making room).
    fn slot(&mut self, key_group: u32, key: &K) -> Result<usize, StateError> {
        if let Some(i) = self.cache.get_index_of(key) {
            return Ok(i);
        }
        if self.cache.len() >= self.capacity {
            self.evict()?;
        } else {
            self.bound_dirty()?;
        }
        let value = self.load(key_group, key)?;
        let (i, _) = self.cache.insert_full(
            key.clone(),
            Slot {
                key_group,
                value,
                dirty: false,
            },
        );
        Ok(i)
    }

    /// Slot `i` changed; it had a value when `had` was true.
    fn mark(&mut self, i: usize, had: bool) {
        let slot = &mut self.cache[i];
        self.delta_len += i64::from(slot.value.is_some()) - i64::from(had);
        if !slot.dirty {
            slot.dirty = true;
            self.dirty.push(i);
        }
    }

    /// Flushes once a bounded number of entries is dirty: a write
    /// transaction holds the pages it changes in memory until it commits.
    fn bound_dirty(&mut self) -> Result<(), StateError> {
        if self.dirty.len() >= (self.capacity / 8).max(1) {
            self.flush_dirty()?;
        }
        Ok(())
    }

    /// Checks a few cached entries after the sweep cursor and removes the
    /// expired; owes the same number of rows to the next database sweep.
    fn sweep(&mut self, now: Timestamp) {
        self.last_now = now;
        let Some(ttl) = &self.ttl else {
            return;
        };
        let budget = ttl.cleanup_per_access;
        let ttl_ms = ttl.ttl_ms();
        self.db_sweep = (self.db_sweep + budget).min(MAX_DB_SWEEP);
        for _ in 0..budget {
            if self.cursor >= self.cache.len() {
                self.cursor = 0;
                continue;
            }
            let i = self.cursor;
            self.cursor += 1;
            let expired = self.cache[i]
                .value
                .as_ref()
                .is_some_and(|e| e.stamp.saturating_add(ttl_ms) <= now);
            if expired {
                self.cache[i].value = None;
                self.mark(i, true);
            }
        }
    }

    /// Writes the dirty entries to the database in one transaction (and
    /// sweeps expired rows), records the changed rows, reopens the reader.
    fn flush_dirty(&mut self) -> Result<(), StateError> {
        let sweep = if self.ttl.is_some() { self.db_sweep } else { 0 };
        if self.dirty.is_empty() && sweep == 0 {
            return Ok(());
        }
        let mut rows: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::with_capacity(self.dirty.len());
        for &i in &self.dirty {
            let Some((k, slot)) = self.cache.get_index(i) else {
                continue;
            };
            let row = postcard::to_extend(k, slot.key_group.to_be_bytes().to_vec())
                .map_err(|e| self.serde(e))?;
            let value = match &slot.value {
                Some(e) => Some(encode_row(e.stamp, &e.value).map_err(|e| self.serde(e))?),
                None => None,
            };
            rows.push((row, value));
        }
        rows.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let ttl_ms = self.ttl.as_ref().map_or(i64::MAX, |t| t.ttl_ms());
        let now = self.last_now;
        let mut cursor = std::mem::take(&mut self.db_cursor);
        let def: Def<'_> = TableDefinition::new(&self.name);
        let expired = self.store.write(|txn| {
            let mut table = txn.open_table(def)?;
            for (k, v) in &rows {
                match v {
                    Some(v) => {
                        table.insert(k.as_slice(), v.as_slice())?;
                    }
                    None => {
                        table.remove(k.as_slice())?;
                    }
                }
            }
            let mut expired = Vec::new();
            let mut steps = 0;
            'passes: for _ in 0..2 {
                if steps >= sweep {
                    break;
                }
                for row in
                    table.range::<&[u8]>((Bound::Excluded(cursor.as_slice()), Bound::Unbounded))?
                {
                    let (k, v) = row?;
                    steps += 1;
                    cursor.clear();
                    cursor.extend_from_slice(k.value());
                    if row_stamp(v.value()).saturating_add(ttl_ms) <= now {
                        expired.push(cursor.clone());
                    }
                    if steps >= sweep {
                        break 'passes;
                    }
                }
                // Reached the end: start over.
                cursor.clear();
                steps += 1;
            }
            for k in &expired {
                table.remove(k.as_slice())?;
            }
            Ok(expired)
        })?;
        self.db_cursor = cursor;
        self.db_sweep = 0;
        for &i in &self.dirty {
            if let Some((_, slot)) = self.cache.get_index_mut(i) {
                slot.dirty = false;
            }
        }
        self.dirty.clear();
        for row in &expired {
            // A cached copy of a swept row is expired as well: now absent.
            if let Ok(k) = postcard::from_bytes::<K>(&row[4..])
                && let Some(slot) = self.cache.get_mut(&k)
            {
                slot.value = None;
            }
        }
        if self.store.recording() {
            let changed = rows
                .into_iter()
                .map(|(k, _)| k)
                .chain(expired)
                .map(Vec::into_boxed_slice);
            self.store.record(&self.meta.name, changed);
        }
        self.delta_len = 0;
        self.open_reader()
    }

    /// Flushes, then drops the older half of the cache.
    fn evict(&mut self) -> Result<(), StateError> {
        self.flush_dirty()?;
        let n = (self.cache.len() / 2).max(1);
        self.cache.drain(..n);
        self.cursor = 0;
        Ok(())
    }

    /// Flushes and empties the cache (before writing rows directly).
    fn drop_cache(&mut self) -> Result<(), StateError> {
        self.flush_dirty()?;
        self.cache.clear();
        self.cursor = 0;
        Ok(())
    }
}

impl<K: StateKey, S: StateValue> KeyedTable<K, S> for RedbTable<K, S> {
    fn get(&mut self, key_group: u32, key: &K, now: Timestamp) -> Result<Option<&S>, StateError> {
        self.check(key_group)?;
        self.sweep(now);
        let i = self.slot(key_group, key)?;
        let stamp = match &self.cache[i].value {
            None => return Ok(None),
            Some(e) => e.stamp,
        };
        if self.expired(stamp, now) {
            self.cache[i].value = None;
            self.mark(i, true);
            return Ok(None);
        }
        let refresh = self
            .ttl
            .as_ref()
            .is_some_and(|t| t.update_type == TtlUpdateType::OnReadAndWrite);
        if refresh && stamp != now {
            if let Some(e) = &mut self.cache[i].value {
                e.stamp = now;
            }
            self.mark(i, true);
        }
        Ok(self.cache[i].value.as_ref().map(|e| &e.value))
    }

    fn get_mut(
        &mut self,
        key_group: u32,
        key: &K,
        now: Timestamp,
    ) -> Result<Option<&mut S>, StateError> {
        self.check(key_group)?;
        self.sweep(now);
        let i = self.slot(key_group, key)?;
        let stamp = match &self.cache[i].value {
            None => return Ok(None),
            Some(e) => e.stamp,
        };
        if self.expired(stamp, now) {
            self.cache[i].value = None;
            self.mark(i, true);
            return Ok(None);
        }
        self.mark(i, true);
        Ok(self.cache[i].value.as_mut().map(|e| {
            e.stamp = now;
            &mut e.value
        }))
    }

    fn put(&mut self, key_group: u32, key: &K, value: S, now: Timestamp) -> Result<(), StateError> {
        self.check(key_group)?;
        self.sweep(now);
        let i = self.slot(key_group, key)?;
        let had = self.cache[i]
            .value
            .replace(Stamped { value, stamp: now })
            .is_some();
        self.mark(i, had);
        Ok(())
    }

    fn take(&mut self, key_group: u32, key: &K, now: Timestamp) -> Result<Option<S>, StateError> {
        self.check(key_group)?;
        self.sweep(now);
        let i = self.slot(key_group, key)?;
        let Some(e) = self.cache[i].value.take() else {
            return Ok(None);
        };
        self.mark(i, true);
        Ok((!self.expired(e.stamp, now)).then_some(e.value))
    }
}

impl<K: StateKey, S: StateValue> StateTable<K> for RedbTable<K, S> {
    fn meta(&self) -> &StateMeta {
        &self.meta
    }

    fn table_type(&self) -> TypeId {
        TypeId::of::<Self>()
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn capture(&mut self) -> Box<dyn CapturedState> {
        let read = self
            .flush_dirty()
            .and_then(|()| self.store.read())
            .map(Arc::new);
        Box::new(RedbCaptured {
            meta: self.meta.clone(),
            operator: self.operator.clone(),
            name: self.name.clone(),
            read,
        })
    }

    fn restore_group(&mut self, key_group: u32, bytes: &[u8]) -> Result<(), StateError> {
        self.check(key_group)?;
        self.drop_cache()?;
        let entries: Vec<(K, Stamped<S>)> =
            postcard::from_bytes(bytes).map_err(|e| self.serde(e))?;
        let mut rows = Vec::with_capacity(entries.len());
        for (k, e) in &entries {
            let row = postcard::to_extend(k, key_group.to_be_bytes().to_vec())
                .map_err(|e| self.serde(e))?;
            let value = encode_row(e.stamp, &e.value).map_err(|e| self.serde(e))?;
            rows.push((row, value));
        }
        let def = self.def();
        let start = key_group.to_be_bytes();
        let end = (key_group + 1).to_be_bytes();
        let last = key_group == u32::MAX;
        self.store.write(|txn| {
            let mut table = txn.open_table(def)?;
            if last {
                table.retain_in::<&[u8], _>(start.as_slice().., |_, _| false)?;
            } else {
                table.retain_in::<&[u8], _>(start.as_slice()..end.as_slice(), |_, _| false)?;
            }
            for (k, v) in &rows {
                table.insert(k.as_slice(), v.as_slice())?;
            }
            Ok(())
        })?;
        self.open_reader()
    }

    fn apply_group_delta(
        &mut self,
        key_group: u32,
        puts: &[u8],
        removed: &[u8],
    ) -> Result<(), StateError> {
        self.check(key_group)?;
        self.drop_cache()?;
        let entries: Vec<(K, Stamped<S>)> =
            postcard::from_bytes(puts).map_err(|e| self.serde(e))?;
        let removed: Vec<K> = postcard::from_bytes(removed).map_err(|e| self.serde(e))?;
        let row = |k: &K| {
            postcard::to_extend(k, key_group.to_be_bytes().to_vec()).map_err(|e| self.serde(e))
        };
        let mut gone = Vec::with_capacity(removed.len());
        for k in &removed {
            gone.push(row(k)?);
        }
        let mut rows = Vec::with_capacity(entries.len());
        for (k, e) in &entries {
            let value = encode_row(e.stamp, &e.value).map_err(|e| self.serde(e))?;
            rows.push((row(k)?, value));
        }
        let def = self.def();
        self.store.write(|txn| {
            let mut table = txn.open_table(def)?;
            for k in &gone {
                table.remove(k.as_slice())?;
            }
            for (k, v) in &rows {
                table.insert(k.as_slice(), v.as_slice())?;
            }
            Ok(())
        })?;
        self.open_reader()
    }

    fn clear_all(&mut self) {
        self.cache.clear();
        self.dirty.clear();
        self.delta_len = 0;
        self.cursor = 0;
        self.db_cursor.clear();
        self.db_sweep = 0;
        let def = self.def();
        let _ = self.store.write(|txn| {
            txn.delete_table(def)?;
            Ok(())
        });
        let _ = self.open_reader();
    }

    fn len(&self) -> usize {
        usize::try_from(self.db_rows as i64 + self.delta_len).unwrap_or(0)
    }

    fn flush(&mut self) -> Result<(), StateError> {
        self.flush_dirty()
    }

    fn mem_bytes(&self) -> u64 {
        (self.cache.len() * (std::mem::size_of::<K>() + std::mem::size_of::<Slot<S>>())) as u64
    }
}

/// A state's capture: the read transaction of the snapshot's commit.
struct RedbCaptured {
    meta: StateMeta,
    operator: String,
    name: String,
    read: Result<Arc<ReadTransaction>, StateError>,
}

impl RedbCaptured {
    fn table(&self) -> Result<Option<Reader>, StateError> {
        let read = match &self.read {
            Ok(r) => r,
            Err(e) => return Err(storage(&self.operator, e)),
        };
        let def: Def<'_> = TableDefinition::new(&self.name);
        match read.open_table(def) {
            Ok(t) => Ok(Some(t)),
            Err(TableError::TableDoesNotExist(_)) => Ok(None),
            Err(e) => Err(storage(&self.operator, e)),
        }
    }
}

/// The range of the rows of `key_group`.
fn group_range(key_group: u32) -> (Bound<[u8; 4]>, Bound<[u8; 4]>) {
    let end = match key_group.checked_add(1) {
        Some(e) => Bound::Excluded(e.to_be_bytes()),
        None => Bound::Unbounded,
    };
    (Bound::Included(key_group.to_be_bytes()), end)
}

impl CapturedState for RedbCaptured {
    fn meta(&self) -> &StateMeta {
        &self.meta
    }

    fn group_bytes(&self, key_group: u32) -> Result<Option<Vec<u8>>, StateError> {
        let err = |e: &dyn std::fmt::Display| storage(&self.operator, e);
        let Some(table) = self.table()? else {
            return Ok(None);
        };
        let (start, end) = group_range(key_group);
        let range = (
            start.as_ref().map(|b| b.as_slice()),
            end.as_ref().map(|b| b.as_slice()),
        );
        let mut n: usize = 0;
        let mut body = Vec::new();
        for row in table.range::<&[u8]>(range).map_err(|e| err(&e))? {
            let (k, v) = row.map_err(|e| err(&e))?;
            let (k, v) = (k.value(), v.value());
            // postcard of (K, Stamped { value, stamp }): the fields in order.
            body.extend_from_slice(&k[4..]);
            body.extend_from_slice(&v[8..]);
            body = postcard::to_extend(&row_stamp(v), body).map_err(|e| err(&e))?;
            n += 1;
        }
        if n == 0 {
            return Ok(None);
        }
        let mut out = postcard::to_allocvec(&n).map_err(|e| err(&e))?;
        out.extend_from_slice(&body);
        Ok(Some(out))
    }
}

/// A state's capture for an incremental snapshot: the rows changed since
/// the base, read from the snapshot's read transaction.
struct RedbDelta {
    full: RedbCaptured,
    /// Changed row keys, sorted.
    rows: Vec<Box<[u8]>>,
}

impl CapturedState for RedbDelta {
    fn meta(&self) -> &StateMeta {
        &self.full.meta
    }

    fn group_bytes(&self, key_group: u32) -> Result<Option<Vec<u8>>, StateError> {
        self.full.group_bytes(key_group)
    }

    fn group_delta(&self, key_group: u32) -> Result<Option<GroupDelta>, StateError> {
        let prefix = key_group.to_be_bytes();
        let start = self.rows.partition_point(|r| r[..4] < prefix[..]);
        let end = self.rows.partition_point(|r| r[..4] <= prefix[..]);
        if start == end {
            return Ok(None);
        }
        let err = |e: &dyn std::fmt::Display| storage(&self.full.operator, e);
        let table = self.full.table()?;
        let (mut puts, mut removed) = (Vec::new(), Vec::new());
        let (mut n_puts, mut n_removed) = (0usize, 0usize);
        for row in &self.rows[start..end] {
            let found = match &table {
                Some(t) => t.get(&row[..]).map_err(|e| err(&e))?,
                None => None,
            };
            match found {
                Some(v) => {
                    let v = v.value();
                    puts.extend_from_slice(&row[4..]);
                    puts.extend_from_slice(&v[8..]);
                    puts = postcard::to_extend(&row_stamp(v), puts).map_err(|e| err(&e))?;
                    n_puts += 1;
                }
                None => {
                    removed.extend_from_slice(&row[4..]);
                    n_removed += 1;
                }
            }
        }
        let with_len = |n: usize, body: Vec<u8>| -> Result<Vec<u8>, StateError> {
            let mut out = postcard::to_allocvec(&n).map_err(|e| err(&e))?;
            out.extend_from_slice(&body);
            Ok(out)
        };
        Ok(Some((
            with_len(n_puts, puts)?,
            with_len(n_removed, removed)?,
        )))
    }
}

/// A snapshot's place in a chain of incremental snapshots.
#[derive(Clone, Copy, Debug)]
struct ChainInfo {
    checkpoint: u64,
    /// Deltas on top of the full snapshot (0: this one is full).
    deltas: usize,
    /// Keys in those deltas, summed.
    keys: usize,
}

/// A snapshot taken and not yet superseded by a completed base.
struct Taken {
    /// `None` for a savepoint (never a base).
    chain: Option<ChainInfo>,
    /// Row keys changed between the previous snapshot and this one.
    changed: FxHashMap<String, FxHashSet<Box<[u8]>>>,
    count: usize,
}

/// The bookkeeping of incremental snapshots.
#[derive(Default)]
struct Incremental {
    /// The last completed checkpoint reported: deltas build on it.
    base: Option<ChainInfo>,
    /// Snapshots since, by checkpoint.
    taken: BTreeMap<u64, Taken>,
    /// Every change after the snapshot of this checkpoint is recorded.
    tracked_since: Option<u64>,
}

/// Keyed state in an embedded redb database, for the key groups of one
/// subtask.
///
/// # Examples
/// ```
/// use floe::state::{KeyScope, RedbStateBackend, StateBackend, ValueStateDescriptor};
///
/// let mut backend = RedbStateBackend::<String>::temp("counter", 128, 0..128)?;
/// let desc = ValueStateDescriptor::<u64>::new("count");
/// let key = "a".to_string();
/// KeyScope::new(&mut backend, &key).value_state(&desc)?.update(3)?;
/// let snapshot = backend.snapshot().serialize()?;
///
/// let mut restored = floe::state::HeapStateBackend::<String>::new("counter", 128, 0..128);
/// restored.restore(&snapshot)?;
/// let v = KeyScope::new(&mut restored, &key).value_state(&desc)?.value()?;
/// assert_eq!(v, Some(3));
/// # Ok::<(), floe::state::StateError>(())
/// ```
pub struct RedbStateBackend<K> {
    operator: String,
    max_parallelism: u32,
    range: Range<u32>,
    clock: Arc<dyn Clock>,
    store: Arc<RedbStore>,
    tables: FxHashMap<String, Box<dyn StateTable<K>>>,
    pending: FxHashMap<String, Vec<PendingBlob>>,
    incremental: Incremental,
}

static TEMP_FILES: AtomicU64 = AtomicU64::new(0);

/// `operator` with every character but ASCII letters and digits replaced.
fn file_stem(operator: &str) -> String {
    operator
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

impl<K> RedbStateBackend<K> {
    /// The default bound of each state's cache, in entries.
    pub const DEFAULT_CACHE_ENTRIES: usize = 65_536;
}

impl<K: Send + 'static> RedbStateBackend<K> {
    /// A backend of `operator` owning the key groups `range` of
    /// `max_parallelism`, in a new database file at `path`.
    pub fn open(
        operator: impl Into<String>,
        max_parallelism: u32,
        range: Range<u32>,
        path: impl Into<PathBuf>,
    ) -> Result<Self, StateError> {
        let operator = operator.into();
        let store = Arc::new(RedbStore::create(&operator, path.into())?);
        Ok(RedbStateBackend {
            operator,
            max_parallelism,
            range,
            clock: Arc::new(SystemClock),
            store,
            tables: FxHashMap::default(),
            pending: FxHashMap::default(),
            incremental: Incremental::default(),
        })
    }

    /// Like [`open`](Self::open), with a file in the system's temp directory.
    pub fn temp(
        operator: impl Into<String>,
        max_parallelism: u32,
        range: Range<u32>,
    ) -> Result<Self, StateError> {
        let operator = operator.into();
        let n = TEMP_FILES.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "floe-state-{}-{n}-{}.redb",
            std::process::id(),
            file_stem(&operator)
        ));
        Self::open(operator, max_parallelism, range, path)
    }

    /// The backend of subtask `subtask` of `parallelism`, in
    /// `<dir>/<operator>-<subtask>.redb` (the temp directory when `dir` is
    /// `None`).
    pub fn for_subtask(
        operator: impl Into<String>,
        max_parallelism: u32,
        subtask: u32,
        parallelism: u32,
        dir: Option<&Path>,
    ) -> Result<Self, StateError> {
        let operator = operator.into();
        let range = key_group_range(subtask, max_parallelism, parallelism.max(1));
        match dir {
            None => Self::temp(operator, max_parallelism, range),
            Some(dir) => {
                let path = dir.join(format!("{}-{subtask}.redb", file_stem(&operator)));
                Self::open(operator, max_parallelism, range, path)
            }
        }
    }

    /// Uses `clock` for TTL (a [`ManualClock`](crate::time::ManualClock) in tests).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Bounds each state's in-memory cache to `entries` entries (at least 2;
    /// default [`DEFAULT_CACHE_ENTRIES`](Self::DEFAULT_CACHE_ENTRIES)).
    /// Applies to states registered afterwards: call it before first use.
    pub fn with_cache_capacity(self, entries: usize) -> Self {
        self.store
            .cache_entries
            .store(entries.max(2), Ordering::Relaxed);
        self
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        self.store.path()
    }

    /// Flushes every cache and opens a read transaction on the result.
    fn flush_and_read(&mut self) -> Result<Arc<ReadTransaction>, StateError> {
        for t in self.tables.values_mut() {
            t.flush()?;
        }
        self.store.read().map(Arc::new)
    }

    /// The captures of every state: full, or the rows in `changed` per state.
    fn captures(
        &self,
        read: &Result<Arc<ReadTransaction>, StateError>,
        mut changed: Option<FxHashMap<String, Vec<Box<[u8]>>>>,
    ) -> Vec<Box<dyn CapturedState>> {
        let mut states: Vec<Box<dyn CapturedState>> = self
            .tables
            .values()
            .map(|t| {
                let full = RedbCaptured {
                    meta: t.meta().clone(),
                    operator: self.operator.clone(),
                    name: format!("state/{}", t.meta().name),
                    read: match read {
                        Ok(r) => Ok(r.clone()),
                        Err(e) => Err(storage(&self.operator, e)),
                    },
                };
                match changed.as_mut() {
                    None => Box::new(full) as Box<dyn CapturedState>,
                    Some(c) => Box::new(RedbDelta {
                        rows: c.remove(&t.meta().name).unwrap_or_default(),
                        full,
                    }),
                }
            })
            .collect();
        states.sort_by(|a, b| a.meta().name.cmp(&b.meta().name));
        states
    }

    fn keys(&self) -> usize {
        self.tables.values().map(|t| t.len()).sum()
    }
}

impl<K: Send + 'static> StateBackend<K> for RedbStateBackend<K> {
    fn operator(&self) -> &str {
        &self.operator
    }

    fn max_parallelism(&self) -> u32 {
        self.max_parallelism
    }

    fn key_group_range(&self) -> Range<u32> {
        self.range.clone()
    }

    fn now(&self) -> Timestamp {
        self.clock.now_ms()
    }

    fn entries(&self, state: &str) -> usize {
        self.tables.get(state).map_or(0, |t| t.len())
    }

    fn redb_store(&self) -> Option<Arc<RedbStore>> {
        Some(self.store.clone())
    }

    fn table(
        &mut self,
        meta: &StateMeta,
        table_type: TypeId,
        create: &mut dyn FnMut(&str) -> Box<dyn StateTable<K>>,
    ) -> Result<&mut dyn StateTable<K>, StateError> {
        register_table(
            &self.operator,
            &mut self.tables,
            &mut self.pending,
            meta,
            table_type,
            create,
        )
    }

    fn snapshot(&mut self) -> Snapshot {
        // Full, and outside the chain: the change record is left alone.
        let read = self.flush_and_read();
        Snapshot {
            operator: self.operator.clone(),
            key_groups: self.range.clone(),
            states: self.captures(&read, None),
            pending: sorted_pending(&self.pending),
            base: None,
        }
    }

    fn snapshot_for(&mut self, checkpoint: CheckpointId, savepoint: bool) -> Snapshot {
        // The incremental record keeps plain numbers (`Snapshot::base`).
        let checkpoint = checkpoint.0;
        let read = self.flush_and_read();
        let keys = self.keys();
        let taken = self.store.take_changes((keys / 2).max(MIN_CHANGE_LIMIT));
        let inc = &mut self.incremental;
        if !taken.complete || read.is_err() {
            // Changes before this snapshot are not all known: only a
            // snapshot from here on can be a base.
            inc.taken.clear();
            inc.tracked_since = Some(checkpoint);
        }
        let base = inc
            .base
            .filter(|b| inc.tracked_since.is_some_and(|s| s <= b.checkpoint))
            .filter(|b| b.checkpoint < checkpoint && b.deltas < MAX_DELTAS);
        // The rows changed since the base: the sealed records after it and
        // the one taken now.
        let mut delta = None;
        if let (Some(b), false, true) = (base, savepoint, taken.complete) {
            let mut union: FxHashMap<String, FxHashSet<Box<[u8]>>> = FxHashMap::default();
            let sealed = inc.taken.range(b.checkpoint + 1..).map(|(_, t)| &t.changed);
            for by_state in sealed.chain(std::iter::once(&taken.by_state)) {
                for (name, rows) in by_state {
                    union
                        .entry(name.clone())
                        .or_default()
                        .extend(rows.iter().cloned());
                }
            }
            let n: usize = union.values().map(|s| s.len()).sum();
            if (b.keys + n).saturating_mul(2) <= keys {
                let sorted = union
                    .into_iter()
                    .map(|(name, rows)| {
                        let mut rows: Vec<Box<[u8]>> = rows.into_iter().collect();
                        rows.sort_unstable();
                        (name, rows)
                    })
                    .collect();
                delta = Some((b, n, sorted));
            }
        }
        if delta.is_none() && !savepoint {
            // Later snapshots build on this one once it completes, never on
            // an older base: the store keeps an older base's blobs only
            // while a retained checkpoint references them.
            inc.base = None;
        }
        let chain = match &delta {
            Some((b, n, _)) => ChainInfo {
                checkpoint,
                deltas: b.deltas + 1,
                keys: b.keys + n,
            },
            None => ChainInfo {
                checkpoint,
                deltas: 0,
                keys: 0,
            },
        };
        inc.taken.insert(
            checkpoint,
            Taken {
                chain: (!savepoint && read.is_ok()).then_some(chain),
                changed: taken.by_state,
                count: taken.count,
            },
        );
        // Bound the memory of records no checkpoint completes to release.
        let held: usize = inc.taken.values().map(|t| t.count).sum();
        if held > keys.max(MIN_CHANGE_LIMIT) {
            inc.taken.clear();
            inc.tracked_since = Some(checkpoint);
        }
        let (base, changed) = match delta {
            Some((b, _, rows)) => (Some(b.checkpoint), Some(rows)),
            None => (None, None),
        };
        Snapshot {
            operator: self.operator.clone(),
            key_groups: self.range.clone(),
            states: self.captures(&read, changed),
            // Restored, unregistered states do not change: the base has them.
            pending: if base.is_some() {
                Vec::new()
            } else {
                sorted_pending(&self.pending)
            },
            base,
        }
    }

    fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) {
        let checkpoint = checkpoint.0;
        let inc = &mut self.incremental;
        let Some(chain) = inc.taken.get(&checkpoint).and_then(|t| t.chain) else {
            return;
        };
        if inc.tracked_since.is_none_or(|s| s > checkpoint) {
            return;
        }
        if inc.base.is_some_and(|b| b.checkpoint >= checkpoint) {
            return;
        }
        // A full snapshot taken since supersedes it: building on the older
        // one could reference blobs that retention removes once the full
        // one completes.
        let superseded = inc
            .taken
            .range(checkpoint + 1..)
            .any(|(_, t)| t.chain.is_some_and(|c| c.deltas == 0));
        if superseded {
            return;
        }
        inc.base = Some(chain);
        inc.taken.retain(|&c, _| c > checkpoint);
    }

    fn restore(&mut self, groups: &[KeyGroupBytes]) -> Result<(), StateError> {
        self.incremental = Incremental::default();
        self.store.reset_changes();
        restore_into(
            &self.operator,
            &self.range,
            &mut self.tables,
            &mut self.pending,
            groups,
        )
    }

    fn state_size(&self) -> floe_actors::metrics::StateSize {
        floe_actors::metrics::StateSize {
            entries: self.tables.values().map(|t| t.len() as u64).sum(),
            // The database file: what the state takes on disk.
            bytes: std::fs::metadata(self.path()).map_or(0, |m| m.len()),
        }
    }
}
