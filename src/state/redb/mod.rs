//! The redb state backend: every state in an embedded redb database file per
//! subtask, behind a bounded in-memory cache per state.
//!
//! Layout: one redb table per registered state (named `state/<name>`); an
//! entry's row key is the key group as a big-endian `u32` followed by the
//! postcard bytes of the key, so the entries of a key group are one
//! contiguous range; its payload is the TTL stamp as a big-endian `i64`
//! followed by the postcard bytes of the value (so expiry is checked without
//! decoding the value). A B-tree row holds a run of consecutive entries of
//! one key group (see `chunk`): a flush rewrites the runs its changes fall in
//! rather than inserting a row per key.
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
//! table of the last commit, held open between flushes — unless the state's
//! key filter (a Bloom filter of the row keys the table may hold, rebuilt
//! from the rows as the table outgrows it) rules the key out: a key never
//! seen before, as in a count over mostly new words, costs a hash and one
//! cache line instead of a B-tree lookup. So state larger than
//! memory works: only the cache (and the filter) is in memory. TTL is checked on every access
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
use super::error::{BoxError, StateError};
use super::snapshot::{
    CapturedState, KeyGroupBytes, PendingBlob, Snapshot, register_table, restore_into,
    sorted_pending,
};
use super::{StateBackend, StateTable};
use crate::time::{Clock, SystemClock};
use floe_actors::element::Timestamp;
use floe_actors::ids::CheckpointId;
use floe_actors::keygroup::key_group_range;
use redb::{Database, ReadOnlyTable, ReadTransaction, TableDefinition};
use rustc_hash::{FxHashMap, FxHashSet};
use std::any::TypeId;
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

mod cache;
mod chunk;
mod filter;
mod snapshot;
mod store;

pub(crate) use cache::RedbTable;
use snapshot::{RedbCaptured, RedbDelta};

type Def<'a> = TableDefinition<'a, &'static [u8], &'static [u8]>;
type Reader = ReadOnlyTable<&'static [u8], &'static [u8]>;

/// The most deltas a chain of incremental snapshots holds on top of its full
/// snapshot; the next snapshot is full.
pub const MAX_DELTAS: usize = 8;

/// redb's page cache per database (its default is 1 GiB).
const DB_CACHE_BYTES: usize = 8 << 20;

/// The fewest changed keys the change record holds before it gives up.
const MIN_CHANGE_LIMIT: usize = 1 << 16;

fn storage(operator: &str, e: impl Into<BoxError>) -> StateError {
    StateError::Storage {
        operator: operator.to_string(),
        source: e.into(),
    }
}

/// A state file that could not be created, with the I/O or redb error.
#[derive(Debug, thiserror::Error)]
#[error("cannot create state file {}: {source}", path.display())]
struct CreateError {
    path: PathBuf,
    #[source]
    source: BoxError,
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
    /// The error is shared: every state's capture reports it as its source.
    fn flush_and_read(&mut self) -> Result<Arc<ReadTransaction>, Arc<StateError>> {
        for t in self.tables.values_mut() {
            t.flush().map_err(Arc::new)?;
        }
        self.store.read().map(Arc::new).map_err(Arc::new)
    }

    /// The captures of every state: full, or the rows in `changed` per state.
    fn captures(
        &self,
        read: &Result<Arc<ReadTransaction>, Arc<StateError>>,
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
                    read: read.clone(),
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
