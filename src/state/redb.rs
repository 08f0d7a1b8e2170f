//! The redb state backend: every state in an embedded redb database file per
//! subtask.
//!
//! Layout: one redb table per registered state (named `state/<name>`); a row
//! key is the key group as a big-endian `u32` followed by the postcard bytes
//! of the key, so the rows of a key group are one contiguous range; a row
//! value is the TTL stamp as a big-endian `i64` followed by the postcard bytes
//! of the value (so expiry is checked without decoding the value).
//!
//! All reads and writes go through one long-lived write transaction; the
//! synchronous part of a snapshot writes back the one buffered value, commits
//! that transaction and opens a read transaction, which is redb's MVCC view of
//! the committed state: [`Snapshot::serialize`] reads the key groups from it
//! while processing goes on in a new write transaction. The bytes are the same
//! [`KeyGroupBytes`] format as the heap backend's, so a snapshot of either
//! backend restores into either backend.
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
    CapturedState, KeyGroupBytes, PendingBlob, Snapshot, register_table, restore_into,
    sorted_pending,
};
use super::table::{KeyedTable, Stamped};
use super::ttl::{StateTtlConfig, TtlUpdateType};
use super::{StateBackend, StateKey, StateTable, StateValue};
use crate::time::{Clock, SystemClock};
use floe_actors::element::Timestamp;
use floe_actors::keygroup::key_group_range;
use redb::{
    Database, Durability, ReadTransaction, ReadableTable, ReadableTableMetadata, TableDefinition,
    TableError, WriteTransaction,
};
use rustc_hash::FxHashMap;
use std::any::{Any, TypeId};
use std::marker::PhantomData;
use std::ops::{Bound, Range};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

type Def<'a> = TableDefinition<'a, &'static [u8], &'static [u8]>;

fn storage(operator: &str, e: impl std::fmt::Display) -> StateError {
    StateError::Storage {
        operator: operator.to_string(),
        message: e.to_string(),
    }
}

/// The database of one [`RedbStateBackend`] and its open write transaction,
/// shared by the backend's tables.
pub struct RedbStore {
    operator: String,
    path: PathBuf,
    txn: Mutex<Option<WriteTransaction>>,
    db: Database,
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
        let db = Database::create(&path).map_err(|e| fail(&e))?;
        let txn = db.begin_write().map_err(|e| fail(&e))?;
        Ok(RedbStore {
            operator: operator.to_string(),
            path,
            txn: Mutex::new(Some(txn)),
            db,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn with_txn<R>(
        &self,
        f: impl FnOnce(&WriteTransaction) -> Result<R, redb::Error>,
    ) -> Result<R, StateError> {
        let guard = self.txn.lock().unwrap_or_else(|e| e.into_inner());
        let txn = guard
            .as_ref()
            .ok_or_else(|| storage(&self.operator, "no open write transaction"))?;
        f(txn).map_err(|e| storage(&self.operator, e))
    }

    /// Commits the write transaction, opens a read transaction on what was
    /// committed and a new write transaction.
    fn commit_and_read(&self) -> Result<ReadTransaction, StateError> {
        let mut guard = self.txn.lock().unwrap_or_else(|e| e.into_inner());
        let err = |e: &dyn std::fmt::Display| storage(&self.operator, e);
        if let Some(mut txn) = guard.take() {
            txn.set_durability(Durability::Immediate);
            txn.commit().map_err(|e| err(&e))?;
        }
        let read = self.db.begin_read().map_err(|e| err(&e));
        *guard = Some(self.db.begin_write().map_err(|e| err(&e))?);
        read
    }
}

impl Drop for RedbStore {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// One state's rows in the redb database, typed.
pub(crate) struct RedbTable<K, S> {
    meta: StateMeta,
    operator: String,
    ttl: Option<StateTtlConfig>,
    range: Range<u32>,
    store: Arc<RedbStore>,
    name: String,
    /// The last value read, which `get`/`get_mut` return a reference to.
    slot: Option<S>,
    /// The row key and stamp of `slot` when `get_mut` lent it out: written
    /// back before the next access.
    dirty: Option<(Vec<u8>, Timestamp)>,
    /// The TTL sweep's position: the last row key checked.
    cursor: Vec<u8>,
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
        RedbTable {
            name: format!("state/{}", meta.name),
            meta,
            operator: operator.to_string(),
            ttl,
            range,
            store,
            slot: None,
            dirty: None,
            cursor: Vec::new(),
            _k: PhantomData,
        }
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

    fn row_key(&self, key_group: u32, key: &K) -> Result<Vec<u8>, StateError> {
        if !self.range.contains(&key_group) {
            return Err(StateError::KeyGroupOutOfRange {
                operator: self.operator.clone(),
                key_group,
                start: self.range.start,
                end: self.range.end,
            });
        }
        postcard::to_extend(key, key_group.to_be_bytes().to_vec()).map_err(|e| self.serde(e))
    }

    fn expired(&self, stamp: Timestamp, now: Timestamp) -> bool {
        self.ttl
            .as_ref()
            .is_some_and(|t| stamp.saturating_add(t.ttl_ms()) <= now)
    }

    /// Writes back the value lent out by `get_mut`.
    fn write_back(&mut self) -> Result<(), StateError> {
        let Some((row, stamp)) = self.dirty.take() else {
            return Ok(());
        };
        let Some(value) = self.slot.as_ref() else {
            return Ok(());
        };
        let bytes = encode_row(stamp, value).map_err(|e| self.serde(e))?;
        let def = self.def();
        self.store.with_txn(|txn| {
            txn.open_table(def)?
                .insert(row.as_slice(), bytes.as_slice())?;
            Ok(())
        })
    }

    /// Checks a few rows after the sweep cursor and removes the expired.
    fn sweep(&mut self, now: Timestamp) -> Result<(), StateError> {
        let Some(ttl) = self.ttl.clone() else {
            return Ok(());
        };
        let budget = ttl.cleanup_per_access;
        if budget == 0 {
            return Ok(());
        }
        let ttl_ms = ttl.ttl_ms();
        let mut cursor = std::mem::take(&mut self.cursor);
        let def = self.def();
        self.store.with_txn(|txn| {
            let mut table = txn.open_table(def)?;
            if table.is_empty()? {
                cursor.clear();
                return Ok(());
            }
            let mut steps = 0;
            let mut expired = Vec::new();
            while steps < budget {
                let mut reached_end = true;
                for row in
                    table.range::<&[u8]>((Bound::Excluded(cursor.as_slice()), Bound::Unbounded))?
                {
                    let (k, v) = row?;
                    steps += 1;
                    cursor = k.value().to_vec();
                    if row_stamp(v.value()).saturating_add(ttl_ms) <= now {
                        expired.push(cursor.clone());
                    }
                    if steps >= budget {
                        reached_end = false;
                        break;
                    }
                }
                if reached_end {
                    cursor.clear();
                    steps += 1;
                }
            }
            for k in expired {
                table.remove(k.as_slice())?;
            }
            Ok(())
        })?;
        self.cursor = cursor;
        Ok(())
    }

    /// The row of `key`: its stamp and value, removed (and `None`) if expired.
    fn load(
        &mut self,
        key_group: u32,
        key: &K,
        now: Timestamp,
    ) -> Result<Option<(Vec<u8>, Timestamp, S)>, StateError> {
        self.write_back()?;
        let row = self.row_key(key_group, key)?;
        self.sweep(now)?;
        let def = self.def();
        let found = self.store.with_txn(|txn| {
            let mut table = txn.open_table(def)?;
            let bytes = table.get(row.as_slice())?.map(|v| v.value().to_vec());
            if let Some(b) = &bytes
                && self.expired(row_stamp(b), now)
            {
                table.remove(row.as_slice())?;
                return Ok(None);
            }
            Ok(bytes)
        })?;
        let Some(bytes) = found else {
            return Ok(None);
        };
        let value: S = postcard::from_bytes(&bytes[8..]).map_err(|e| self.serde(e))?;
        Ok(Some((row, row_stamp(&bytes), value)))
    }
}

impl<K: StateKey, S: StateValue> KeyedTable<K, S> for RedbTable<K, S> {
    fn get(&mut self, key_group: u32, key: &K, now: Timestamp) -> Result<Option<&S>, StateError> {
        let Some((row, stamp, value)) = self.load(key_group, key, now)? else {
            return Ok(None);
        };
        let refresh = self
            .ttl
            .as_ref()
            .is_some_and(|t| t.update_type == TtlUpdateType::OnReadAndWrite);
        self.slot = Some(value);
        if refresh && stamp != now {
            self.dirty = Some((row, now));
        }
        Ok(self.slot.as_ref())
    }

    fn get_mut(
        &mut self,
        key_group: u32,
        key: &K,
        now: Timestamp,
    ) -> Result<Option<&mut S>, StateError> {
        let Some((row, _, value)) = self.load(key_group, key, now)? else {
            return Ok(None);
        };
        self.slot = Some(value);
        self.dirty = Some((row, now));
        Ok(self.slot.as_mut())
    }

    fn put(&mut self, key_group: u32, key: &K, value: S, now: Timestamp) -> Result<(), StateError> {
        self.write_back()?;
        let row = self.row_key(key_group, key)?;
        self.sweep(now)?;
        let bytes = encode_row(now, &value).map_err(|e| self.serde(e))?;
        let def = self.def();
        self.store.with_txn(|txn| {
            txn.open_table(def)?
                .insert(row.as_slice(), bytes.as_slice())?;
            Ok(())
        })
    }

    fn take(&mut self, key_group: u32, key: &K, now: Timestamp) -> Result<Option<S>, StateError> {
        self.write_back()?;
        let row = self.row_key(key_group, key)?;
        self.sweep(now)?;
        let def = self.def();
        let removed = self.store.with_txn(|txn| {
            Ok(txn
                .open_table(def)?
                .remove(row.as_slice())?
                .map(|v| v.value().to_vec()))
        })?;
        match removed {
            Some(b) if !self.expired(row_stamp(&b), now) => postcard::from_bytes(&b[8..])
                .map(Some)
                .map_err(|e| self.serde(e)),
            _ => Ok(None),
        }
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
            .write_back()
            .and_then(|()| self.store.commit_and_read())
            .map(Arc::new);
        Box::new(RedbCaptured {
            meta: self.meta.clone(),
            operator: self.operator.clone(),
            name: self.name.clone(),
            read,
        })
    }

    fn restore_group(&mut self, key_group: u32, bytes: &[u8]) -> Result<(), StateError> {
        self.write_back()?;
        let entries: Vec<(K, Stamped<S>)> =
            postcard::from_bytes(bytes).map_err(|e| self.serde(e))?;
        let mut rows = Vec::with_capacity(entries.len());
        for (k, e) in &entries {
            let row = self.row_key(key_group, k)?;
            let value = encode_row(e.stamp, &e.value).map_err(|e| self.serde(e))?;
            rows.push((row, value));
        }
        let def = self.def();
        let start = key_group.to_be_bytes();
        let end = (key_group + 1).to_be_bytes();
        self.store.with_txn(|txn| {
            let mut table = txn.open_table(def)?;
            table.retain_in::<&[u8], _>(start.as_slice()..end.as_slice(), |_, _| false)?;
            for (k, v) in &rows {
                table.insert(k.as_slice(), v.as_slice())?;
            }
            Ok(())
        })
    }

    fn clear_all(&mut self) {
        self.slot = None;
        self.dirty = None;
        self.cursor.clear();
        let def = self.def();
        let _ = self.store.with_txn(|txn| {
            txn.delete_table(def)?;
            Ok(())
        });
    }

    fn len(&self) -> usize {
        let def = self.def();
        self.store
            .with_txn(|txn| Ok(txn.open_table(def)?.len()?))
            .map_or(0, |n| n as usize)
    }

    fn flush(&mut self) -> Result<(), StateError> {
        self.write_back()
    }
}

/// A state's capture: the read transaction of the snapshot's commit.
struct RedbCaptured {
    meta: StateMeta,
    operator: String,
    name: String,
    read: Result<Arc<ReadTransaction>, StateError>,
}

impl CapturedState for RedbCaptured {
    fn meta(&self) -> &StateMeta {
        &self.meta
    }

    fn group_bytes(&self, key_group: u32) -> Result<Option<Vec<u8>>, StateError> {
        let read = match &self.read {
            Ok(r) => r,
            Err(e) => return Err(storage(&self.operator, e)),
        };
        let err = |e: &dyn std::fmt::Display| storage(&self.operator, e);
        let def: Def<'_> = TableDefinition::new(&self.name);
        let table = match read.open_table(def) {
            Ok(t) => t,
            Err(TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(err(&e)),
        };
        let start = key_group.to_be_bytes();
        let end = (key_group + 1).to_be_bytes();
        let mut n: usize = 0;
        let mut body = Vec::new();
        for row in table
            .range::<&[u8]>(start.as_slice()..end.as_slice())
            .map_err(|e| err(&e))?
        {
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
}

static TEMP_FILES: AtomicU64 = AtomicU64::new(0);

/// `operator` with every character but ASCII letters and digits replaced.
fn file_stem(operator: &str) -> String {
    operator
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
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

    /// The database file.
    pub fn path(&self) -> &Path {
        self.store.path()
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
        let flushed = self
            .tables
            .values_mut()
            .try_for_each(|t| t.flush())
            .and_then(|()| self.store.commit_and_read())
            .map(Arc::new);
        let mut states: Vec<Box<dyn CapturedState>> = self
            .tables
            .values()
            .map(|t| {
                let read = match &flushed {
                    Ok(r) => Ok(r.clone()),
                    Err(e) => Err(storage(&self.operator, e)),
                };
                Box::new(RedbCaptured {
                    meta: t.meta().clone(),
                    operator: self.operator.clone(),
                    name: format!("state/{}", t.meta().name),
                    read,
                }) as Box<dyn CapturedState>
            })
            .collect();
        states.sort_by(|a, b| a.meta().name.cmp(&b.meta().name));
        Snapshot {
            operator: self.operator.clone(),
            key_groups: self.range.clone(),
            states,
            pending: sorted_pending(&self.pending),
        }
    }

    fn restore(&mut self, groups: &[KeyGroupBytes]) -> Result<(), StateError> {
        restore_into(
            &self.operator,
            &self.range,
            &mut self.tables,
            &mut self.pending,
            groups,
        )
    }
}
