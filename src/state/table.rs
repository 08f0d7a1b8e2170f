//! The heap backend's storage of one state: a map per key group, copy-on-write.
//!
//! A [`TypedTable`] holds, for each key group of the subtask's range, an
//! `Arc<IndexMap<key, Stamped<value>>>`. Values are stored typed (not
//! serialized): the table is type-erased as a `Box<dyn StateTable<K>>` in the
//! backend and downcast by the state handles. A snapshot clones the `Arc`s
//! (cheap: one per key group); the next write to a key group still shared by a
//! snapshot copies that group once (`Arc::make_mut`), so the capture stays
//! consistent while processing goes on. The index map gives the TTL sweep a
//! cursor that survives between accesses.

use super::descriptor::StateMeta;
use super::error::StateError;
use super::ttl::{StateTtlConfig, TtlUpdateType};
use super::{StateKey, StateTable, StateValue};
use floe_actors::element::Timestamp;
use indexmap::IndexMap;
use rustc_hash::FxBuildHasher;
use serde::{Deserialize, Serialize};
use std::any::{Any, TypeId};
use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

/// A value with the processing time of its last TTL refresh.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Stamped<S> {
    /// The value.
    pub value: S,
    /// When it was last written (or read, with `OnReadAndWrite`).
    pub stamp: Timestamp,
}

type Group<K, S> = IndexMap<K, Stamped<S>, FxBuildHasher>;

/// One state's values, per key group and key.
pub struct TypedTable<K, S> {
    meta: StateMeta,
    operator: String,
    ttl: Option<StateTtlConfig>,
    range: Range<u32>,
    groups: Vec<Arc<Group<K, S>>>,
    /// The TTL sweep's position: (local key group, index in its map).
    cursor: (usize, usize),
}

impl<K: StateKey, S: StateValue> TypedTable<K, S> {
    /// An empty table for the key groups `range`.
    pub fn new(
        meta: StateMeta,
        operator: &str,
        ttl: Option<StateTtlConfig>,
        range: Range<u32>,
    ) -> Self {
        let groups = range.clone().map(|_| Arc::new(Group::default())).collect();
        TypedTable {
            meta,
            operator: operator.to_string(),
            ttl,
            range,
            groups,
            cursor: (0, 0),
        }
    }

    fn local(&self, key_group: u32) -> Result<usize, StateError> {
        if self.range.contains(&key_group) {
            Ok((key_group - self.range.start) as usize)
        } else {
            Err(StateError::KeyGroupOutOfRange {
                operator: self.operator.clone(),
                key_group,
                start: self.range.start,
                end: self.range.end,
            })
        }
    }

    fn expired(&self, e: &Stamped<S>, now: Timestamp) -> bool {
        self.ttl
            .as_ref()
            .is_some_and(|t| e.stamp.saturating_add(t.ttl_ms()) <= now)
    }

    /// Checks a few entries after the sweep cursor and removes the expired.
    fn sweep(&mut self, now: Timestamp) {
        let Some(budget) = self.ttl.as_ref().map(|t| t.cleanup_per_access) else {
            return;
        };
        if self.groups.is_empty() {
            return;
        }
        for _ in 0..budget {
            let (g, i) = self.cursor;
            let g = g % self.groups.len();
            let expired = match self.groups[g].get_index(i) {
                None => {
                    self.cursor = ((g + 1) % self.groups.len(), 0);
                    continue;
                }
                Some((_, e)) => self.expired(e, now),
            };
            if expired {
                // swap_remove moves the last entry to `i`: check `i` again next.
                Arc::make_mut(&mut self.groups[g]).swap_remove_index(i);
                self.cursor = (g, i);
            } else {
                self.cursor = (g, i + 1);
            }
        }
    }

    /// Reads a key's value; expired values are removed and not returned.
    pub fn get(
        &mut self,
        key_group: u32,
        key: &K,
        now: Timestamp,
    ) -> Result<Option<&S>, StateError> {
        let g = self.local(key_group)?;
        self.sweep(now);
        let (expired, stamp) = match self.groups[g].get(key) {
            None => return Ok(None),
            Some(e) => (self.expired(e, now), e.stamp),
        };
        if expired {
            Arc::make_mut(&mut self.groups[g]).swap_remove(key);
            return Ok(None);
        }
        let refresh = self
            .ttl
            .as_ref()
            .is_some_and(|t| t.update_type == TtlUpdateType::OnReadAndWrite);
        if refresh
            && stamp != now
            && let Some(e) = Arc::make_mut(&mut self.groups[g]).get_mut(key)
        {
            e.stamp = now;
        }
        Ok(self.groups[g].get(key).map(|e| &e.value))
    }

    /// A key's value for in-place modification (refreshing its TTL as a
    /// write); expired values are removed and not returned.
    pub fn get_mut(
        &mut self,
        key_group: u32,
        key: &K,
        now: Timestamp,
    ) -> Result<Option<&mut S>, StateError> {
        let g = self.local(key_group)?;
        self.sweep(now);
        let expired = match self.groups[g].get(key) {
            None => return Ok(None),
            Some(e) => self.expired(e, now),
        };
        let group = Arc::make_mut(&mut self.groups[g]);
        if expired {
            group.swap_remove(key);
            return Ok(None);
        }
        Ok(group.get_mut(key).map(|e| {
            e.stamp = now;
            &mut e.value
        }))
    }

    /// Writes a key's value.
    pub fn put(
        &mut self,
        key_group: u32,
        key: &K,
        value: S,
        now: Timestamp,
    ) -> Result<(), StateError> {
        let g = self.local(key_group)?;
        self.sweep(now);
        let group = Arc::make_mut(&mut self.groups[g]);
        match group.get_mut(key) {
            Some(e) => *e = Stamped { value, stamp: now },
            None => {
                group.insert(key.clone(), Stamped { value, stamp: now });
            }
        }
        Ok(())
    }

    /// Removes a key's value and returns it unless it had expired.
    pub fn take(
        &mut self,
        key_group: u32,
        key: &K,
        now: Timestamp,
    ) -> Result<Option<S>, StateError> {
        let g = self.local(key_group)?;
        self.sweep(now);
        if !self.groups[g].contains_key(key) {
            return Ok(None);
        }
        let removed = Arc::make_mut(&mut self.groups[g]).swap_remove(key);
        Ok(removed.filter(|e| !self.expired(e, now)).map(|e| e.value))
    }
}

/// What visits a table's entries: a key (borrowed where the table holds it
/// typed) and its value.
pub(crate) type EntryVisitor<'f, K, S> = dyn FnMut(Cow<'_, K>, &S) -> Result<(), StateError> + 'f;

/// The per-key operations the state handles use, implemented by every
/// backend's typed table.
pub(crate) trait KeyedTable<K: Clone, S> {
    /// See [`TypedTable::get`].
    fn get(&mut self, key_group: u32, key: &K, now: Timestamp) -> Result<Option<&S>, StateError>;
    /// See [`TypedTable::get_mut`].
    fn get_mut(
        &mut self,
        key_group: u32,
        key: &K,
        now: Timestamp,
    ) -> Result<Option<&mut S>, StateError>;
    /// See [`TypedTable::put`].
    fn put(&mut self, key_group: u32, key: &K, value: S, now: Timestamp) -> Result<(), StateError>;
    /// See [`TypedTable::take`].
    fn take(&mut self, key_group: u32, key: &K, now: Timestamp) -> Result<Option<S>, StateError>;
    /// Calls `f` with every key holding a value unexpired at `now`, and the
    /// value (a borrowed key where the table holds it typed).
    fn for_each_entry(
        &mut self,
        now: Timestamp,
        f: &mut EntryVisitor<'_, K, S>,
    ) -> Result<(), StateError>;
}

impl<K: StateKey, S: StateValue> KeyedTable<K, S> for TypedTable<K, S> {
    fn get(&mut self, key_group: u32, key: &K, now: Timestamp) -> Result<Option<&S>, StateError> {
        TypedTable::get(self, key_group, key, now)
    }
    fn get_mut(
        &mut self,
        key_group: u32,
        key: &K,
        now: Timestamp,
    ) -> Result<Option<&mut S>, StateError> {
        TypedTable::get_mut(self, key_group, key, now)
    }
    fn put(&mut self, key_group: u32, key: &K, value: S, now: Timestamp) -> Result<(), StateError> {
        TypedTable::put(self, key_group, key, value, now)
    }
    fn take(&mut self, key_group: u32, key: &K, now: Timestamp) -> Result<Option<S>, StateError> {
        TypedTable::take(self, key_group, key, now)
    }
    fn for_each_entry(
        &mut self,
        now: Timestamp,
        f: &mut EntryVisitor<'_, K, S>,
    ) -> Result<(), StateError> {
        for group in &self.groups {
            for (k, e) in group.iter() {
                if !self.expired(e, now) {
                    f(Cow::Borrowed(k), &e.value)?;
                }
            }
        }
        Ok(())
    }
}

/// The synchronous capture of a table: the key-group maps, shared.
struct Captured<K, S> {
    meta: StateMeta,
    operator: String,
    start: u32,
    groups: Vec<Arc<Group<K, S>>>,
}

impl<K: StateKey, S: StateValue> super::snapshot::CapturedState for Captured<K, S> {
    fn meta(&self) -> &StateMeta {
        &self.meta
    }

    fn group_bytes(&self, key_group: u32) -> Result<Option<Vec<u8>>, StateError> {
        let Some(group) = key_group
            .checked_sub(self.start)
            .and_then(|i| self.groups.get(i as usize))
        else {
            return Ok(None);
        };
        if group.is_empty() {
            return Ok(None);
        }
        let entries: Vec<(&K, &Stamped<S>)> = group.iter().collect();
        postcard::to_allocvec(&entries)
            .map(Some)
            .map_err(|e| StateError::Serde {
                operator: self.operator.clone(),
                state: self.meta.name.clone(),
                source: e.into(),
            })
    }
}

impl<K: StateKey, S: StateValue> StateTable<K> for TypedTable<K, S> {
    fn meta(&self) -> &StateMeta {
        &self.meta
    }

    fn table_type(&self) -> TypeId {
        TypeId::of::<Self>()
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn capture(&mut self) -> Box<dyn super::snapshot::CapturedState> {
        Box::new(Captured {
            meta: self.meta.clone(),
            operator: self.operator.clone(),
            start: self.range.start,
            groups: self.groups.clone(),
        })
    }

    fn mem_bytes(&self) -> u64 {
        (self.len() * (std::mem::size_of::<K>() + std::mem::size_of::<Stamped<S>>())) as u64
    }

    fn restore_group(&mut self, key_group: u32, bytes: &[u8]) -> Result<(), StateError> {
        let g = self.local(key_group)?;
        let entries: Vec<(K, Stamped<S>)> =
            postcard::from_bytes(bytes).map_err(|e| StateError::Serde {
                operator: self.operator.clone(),
                state: self.meta.name.clone(),
                source: e.into(),
            })?;
        let group = Arc::make_mut(&mut self.groups[g]);
        group.clear();
        group.extend(entries);
        Ok(())
    }

    fn apply_group_delta(
        &mut self,
        key_group: u32,
        puts: &[u8],
        removed: &[u8],
    ) -> Result<(), StateError> {
        let g = self.local(key_group)?;
        let serde = |e: postcard::Error| StateError::Serde {
            operator: self.operator.clone(),
            state: self.meta.name.clone(),
            source: e.into(),
        };
        let entries: Vec<(K, Stamped<S>)> = postcard::from_bytes(puts).map_err(serde)?;
        let removed: Vec<K> = postcard::from_bytes(removed).map_err(serde)?;
        let group = Arc::make_mut(&mut self.groups[g]);
        for k in &removed {
            group.swap_remove(k);
        }
        group.extend(entries);
        Ok(())
    }

    fn clear_all(&mut self) {
        for g in &mut self.groups {
            *g = Arc::new(Group::default());
        }
        self.cursor = (0, 0);
    }

    fn len(&self) -> usize {
        self.groups.iter().map(|g| g.len()).sum()
    }
}
