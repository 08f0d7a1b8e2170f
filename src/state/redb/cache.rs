//! One state's rows in the database, typed, behind a bounded in-memory cache
//! of decoded entries: reads, writes, bulk flushes, eviction and the TTL sweep.

use super::chunk::{self, Change};
use super::filter::KeyFilter;
use super::snapshot::RedbCaptured;
use super::{Def, Reader, RedbStore, storage};
use crate::state::descriptor::StateMeta;
use crate::state::error::{BoxError, StateError};
use crate::state::snapshot::CapturedState;
use crate::state::table::{EntryVisitor, KeyedTable, Stamped};
use crate::state::ttl::{StateTtlConfig, TtlUpdateType};
use crate::state::{StateKey, StateTable, StateValue};
use floe_actors::element::Timestamp;
use indexmap::IndexMap;
use redb::{ReadableTable, TableDefinition, TableError};
use rustc_hash::FxBuildHasher;
use std::any::{Any, TypeId};
use std::borrow::Cow;
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// A cached entry: its key group, its value (`None`: absent) and whether it
/// differs from the database.
struct Slot<S> {
    key_group: u32,
    value: Option<Stamped<S>>,
    dirty: bool,
}

/// A row of a flush in its buffer: the row key at `start..key_end`, the row
/// value at `key_end..end` (empty: the row is removed).
#[derive(Clone, Copy)]
struct FlushRow {
    start: usize,
    key_end: usize,
    end: usize,
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
    /// Entries in the database as of the last commit (kept by the writes:
    /// a row holds several).
    db_rows: u64,
    /// Over the cached keys: those with a value minus those with a row.
    delta_len: i64,
    /// Row key buffer for misses.
    scratch: Vec<u8>,
    /// Every row key the table may hold: a miss on a key it rules out
    /// skips the B-tree lookup.
    filter: KeyFilter,
    /// A flush's encoded rows, end to end (reused: no allocation per row).
    flush_buf: Vec<u8>,
    /// A flush's rows in `flush_buf`.
    flush_rows: Vec<FlushRow>,
    /// The chunk merge's buffers.
    chunks: chunk::Scratch,
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

pub(super) fn row_stamp(row: &[u8]) -> Timestamp {
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
            filter: KeyFilter::with_capacity(capacity),
            flush_buf: Vec::new(),
            flush_rows: Vec::new(),
            chunks: chunk::Scratch::default(),
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

    fn serde(&self, e: impl Into<super::super::error::BoxError>) -> StateError {
        StateError::Serde {
            operator: self.operator.clone(),
            state: self.meta.name.clone(),
            source: e.into(),
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
        let read = self.store.read()?;
        match read.open_table(self.def()) {
            Ok(t) => {
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
        if !self.filter.may_contain(&self.scratch) {
            return Ok(None);
        }
        let Some(reader) = &self.reader else {
            return Ok(None);
        };
        let found = chunk::with_entry(reader, &self.scratch, |bytes| {
            postcard::from_bytes::<S>(&bytes[8..]).map(|value| Stamped {
                value,
                stamp: row_stamp(bytes),
            })
        })
        .map_err(|e| storage(&self.operator, e))?;
        found.transpose().map_err(|e| self.serde(e))
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
        let mut buf = std::mem::take(&mut self.flush_buf);
        let mut rows = std::mem::take(&mut self.flush_rows);
        buf.clear();
        rows.clear();
        for &i in &self.dirty {
            let Some((k, slot)) = self.cache.get_index(i) else {
                continue;
            };
            let start = buf.len();
            buf.extend_from_slice(&slot.key_group.to_be_bytes());
            buf = postcard::to_extend(k, buf).map_err(|e| self.serde(e))?;
            let key_end = buf.len();
            if let Some(e) = &slot.value {
                buf.extend_from_slice(&e.stamp.to_be_bytes());
                buf = postcard::to_extend(&e.value, buf).map_err(|e| self.serde(e))?;
                // Before the write: the filter never misses a row.
                self.filter.insert(&buf[start..key_end]);
            }
            rows.push(FlushRow {
                start,
                key_end,
                end: buf.len(),
            });
        }
        rows.sort_unstable_by(|a, b| buf[a.start..a.key_end].cmp(&buf[b.start..b.key_end]));
        let ttl_ms = self.ttl.as_ref().map_or(i64::MAX, |t| t.ttl_ms());
        let now = self.last_now;
        let mut cursor = std::mem::take(&mut self.db_cursor);
        let def: Def<'_> = TableDefinition::new(&self.name);
        let changes: Vec<Change<'_>> = rows
            .iter()
            .map(|r| Change {
                row: &buf[r.start..r.key_end],
                payload: (r.end > r.key_end).then(|| &buf[r.key_end..r.end]),
            })
            .collect();
        let mut scratch = std::mem::take(&mut self.chunks);
        let written = self.store.write(|txn| {
            let mut table = txn.open_table(def)?;
            let mut added = chunk::apply(&mut table, &changes, &mut scratch)?;
            let mut expired = Vec::new();
            if sweep > 0 {
                chunk::sweep(
                    &table,
                    &mut cursor,
                    sweep,
                    |p| row_stamp(p).saturating_add(ttl_ms) <= now,
                    &mut expired,
                )?;
                let gone: Vec<Change<'_>> = expired
                    .iter()
                    .map(|k| Change {
                        row: k,
                        payload: None,
                    })
                    .collect();
                added += chunk::apply(&mut table, &gone, &mut scratch)?;
            }
            Ok((expired, added))
        });
        drop(changes);
        self.chunks = scratch;
        let (expired, added) = written?;
        self.db_rows = self.db_rows.saturating_add_signed(added);
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
                .iter()
                .map(|r| Box::from(&buf[r.start..r.key_end]))
                .chain(expired.into_iter().map(Vec::into_boxed_slice));
            self.store.record(&self.meta.name, changed);
        }
        self.flush_buf = buf;
        self.flush_rows = rows;
        self.delta_len = 0;
        self.open_reader()?;
        self.refresh_filter()
    }

    /// Rebuilds the filter from the table's rows (as of the last commit)
    /// once more keys were added to it than it was sized for, sized for
    /// four times the rows: a growing table is rescanned at ×4 steps, so
    /// the rescans cost about a third of a pass over the final rows.
    fn refresh_filter(&mut self) -> Result<(), StateError> {
        if !self.filter.is_full() {
            return Ok(());
        }
        let rows = usize::try_from(self.db_rows).unwrap_or(usize::MAX);
        let mut filter = KeyFilter::with_capacity(rows.saturating_mul(4).max(self.capacity));
        if let Some(reader) = &self.reader {
            let err = |e: BoxError| storage(&self.operator, e);
            let mut row = Vec::new();
            chunk::for_each_entry(
                reader.iter().map_err(|e| err(e.into()))?,
                |prefix, key, _| {
                    row.clear();
                    row.extend_from_slice(prefix);
                    row.extend_from_slice(key);
                    filter.insert(&row);
                    Ok(())
                },
            )
            .map_err(|e| err(e.into()))?;
        }
        self.filter = filter;
        Ok(())
    }

    /// Writes `rows` (row key, payload or `None` to remove) of `key_group`
    /// in one transaction, after removing the group's entries when
    /// `replace`; a later row of a key wins over an earlier one.
    fn write_group(
        &mut self,
        key_group: u32,
        replace: bool,
        mut rows: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    ) -> Result<(), StateError> {
        // Sorted, the last of equal keys kept.
        rows.reverse();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        rows.dedup_by(|later, earlier| later.0 == earlier.0);
        for (k, v) in &rows {
            if v.is_some() {
                // Before the write: the filter never misses a row.
                self.filter.insert(k);
            }
        }
        let changes: Vec<Change<'_>> = rows
            .iter()
            .map(|(k, v)| Change {
                row: k,
                payload: v.as_deref(),
            })
            .collect();
        let mut scratch = std::mem::take(&mut self.chunks);
        let def = self.def();
        let written = self.store.write(|txn| {
            let mut table = txn.open_table(def)?;
            let removed = if replace {
                chunk::clear_group(&mut table, key_group)?
            } else {
                0
            };
            let added = chunk::apply(&mut table, &changes, &mut scratch)?;
            Ok(added - i64::try_from(removed).unwrap_or(i64::MAX))
        });
        self.chunks = scratch;
        let added = written?;
        self.db_rows = self.db_rows.saturating_add_signed(added);
        self.open_reader()?;
        self.refresh_filter()
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

    fn for_each_entry(
        &mut self,
        now: Timestamp,
        f: &mut EntryVisitor<'_, K, S>,
    ) -> Result<(), StateError> {
        self.visit(now, f)
    }
}

impl<K: StateKey, S: StateValue> RedbTable<K, S> {
    /// Flushes, then decodes every row of the last commit in key order.
    fn visit(&mut self, now: Timestamp, f: &mut EntryVisitor<'_, K, S>) -> Result<(), StateError> {
        self.flush_dirty()?;
        let Some(reader) = &self.reader else {
            return Ok(());
        };
        let err = |e: BoxError| storage(&self.operator, e);
        // The callback's or the decoder's error, carried past redb's.
        let mut failed = None;
        let chunks = reader.iter().map_err(|e| err(e.into()))?;
        let walked = chunk::for_each_entry(chunks, |_, key, payload| {
            let stop = || redb::Error::Corrupted("stopped".into());
            if self.expired(row_stamp(payload), now) {
                return Ok(());
            }
            let decoded = postcard::from_bytes::<K>(key)
                .and_then(|k| postcard::from_bytes::<S>(&payload[8..]).map(|v| (k, v)));
            let r = match decoded {
                Ok((k, v)) => f(Cow::Owned(k), &v),
                Err(e) => Err(self.serde(e)),
            };
            r.map_err(|e| {
                failed = Some(e);
                stop()
            })
        });
        match (failed, walked) {
            (Some(e), _) => Err(e),
            (None, r) => r.map_err(|e| err(e.into())),
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
            .flush_dirty()
            .and_then(|()| self.store.read())
            .map(Arc::new)
            .map_err(Arc::new);
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
            rows.push((row, Some(value)));
        }
        self.write_group(key_group, true, rows)
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
        let mut rows = Vec::with_capacity(entries.len() + gone.len());
        rows.extend(gone.into_iter().map(|k| (k, None)));
        for (k, e) in &entries {
            let value = encode_row(e.stamp, &e.value).map_err(|e| self.serde(e))?;
            rows.push((row(k)?, Some(value)));
        }
        self.write_group(key_group, false, rows)
    }

    fn clear_all(&mut self) {
        self.cache.clear();
        self.dirty.clear();
        self.delta_len = 0;
        self.cursor = 0;
        self.db_cursor.clear();
        self.db_sweep = 0;
        let def = self.def();
        let deleted = self.store.write(|txn| {
            txn.delete_table(def)?;
            Ok(())
        });
        if deleted.is_ok() {
            // Only then: the rows left by a failed delete must stay in it.
            self.filter = KeyFilter::with_capacity(self.capacity);
            self.db_rows = 0;
        }
        let _ = self.open_reader();
    }

    fn len(&self) -> usize {
        usize::try_from(self.db_rows as i64 + self.delta_len).unwrap_or(0)
    }

    fn flush(&mut self) -> Result<(), StateError> {
        self.flush_dirty()
    }

    fn mem_bytes(&self) -> u64 {
        (self.cache.len() * (std::mem::size_of::<K>() + std::mem::size_of::<Slot<S>>())
            + self.filter.bytes()) as u64
    }
}
