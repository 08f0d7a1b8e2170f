//! Broadcast state: maps every subtask of a broadcast process function keeps
//! a copy of, written only from the broadcast input.
//!
//! Every subtask receives every element of the broadcast input, so as long as
//! `process_broadcast_element` updates the state the same way for the same
//! elements, all copies stay equal; the keyed (or non-keyed) input only
//! reads them ([`ReadOnlyBroadcastState`]). A [`BroadcastStateStore`] holds
//! the named maps of one subtask, each registered on first use with a
//! [`MapStateDescriptor`].
//!
//! A checkpoint holds every subtask's copy in the operator's `union_list`:
//! one entry per state, the bytes [`BROADCAST_MAGIC`], a postcard header
//! `(subtask, name, type description, fingerprint)`, then the postcard map.
//! On restore, at any parallelism, new subtask `i` takes the copy of the
//! `i mod n`-th of the `n` former subtasks (as Flink does), so every subtask
//! gets exactly one copy. Restoring with other types is a
//! [`StateError::SchemaMismatch`] naming operator and state, reported when the
//! descriptor is first used.

use super::{MapStateDescriptor, StateDescriptor, StateError, StateMeta, StateValue};
use std::any::Any;
use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;

/// The first bytes of every broadcast state entry.
pub const BROADCAST_MAGIC: &[u8; 8] = b"floe.bcs";

trait ErasedMap: Send {
    fn as_any_mut(&mut self) -> &mut dyn Any;
    fn encode(&self, out: Vec<u8>) -> postcard::Result<Vec<u8>>;
}

struct TypedMap<K, V>(HashMap<K, V>);

impl<K: StateValue + Hash + Eq, V: StateValue> ErasedMap for TypedMap<K, V> {
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn encode(&self, out: Vec<u8>) -> postcard::Result<Vec<u8>> {
        postcard::to_extend(&self.0, out)
    }
}

struct Registered {
    meta: StateMeta,
    map: Box<dyn ErasedMap>,
}

/// A state restored but not registered yet.
struct Restored {
    type_desc: String,
    fingerprint: u64,
    /// The postcard map.
    bytes: Vec<u8>,
}

type Header<'a> = (u32, &'a str, &'a str, u64);

fn parse(entry: &[u8]) -> Option<(Header<'_>, &[u8])> {
    let rest = entry.strip_prefix(BROADCAST_MAGIC.as_slice())?;
    postcard::take_from_bytes::<Header<'_>>(rest).ok()
}

/// The broadcast states of one subtask.
///
/// # Examples
/// ```
/// use floe::state::{BroadcastStateStore, MapStateDescriptor};
///
/// let rules = MapStateDescriptor::<String, u64>::new("rules");
/// let mut store = BroadcastStateStore::new("match");
/// store.state(&rules).unwrap().put("max".into(), 10);
/// let entries = store.snapshot(0).unwrap();
///
/// // Any subtask of any parallelism gets the one copy there is.
/// let mut restored = BroadcastStateStore::new("match");
/// restored.restore(&entries, 2).unwrap();
/// assert_eq!(restored.read_only(&rules).unwrap().get(&"max".into()), Some(&10));
/// ```
pub struct BroadcastStateStore {
    operator: String,
    states: HashMap<String, Registered>,
    restored: HashMap<String, Restored>,
}

impl BroadcastStateStore {
    /// An empty store of operator `operator` (named in errors).
    pub fn new(operator: impl Into<String>) -> Self {
        BroadcastStateStore {
            operator: operator.into(),
            states: HashMap::new(),
            restored: HashMap::new(),
        }
    }

    fn map<K: StateValue + Hash + Eq, V: StateValue>(
        &mut self,
        desc: &MapStateDescriptor<K, V>,
    ) -> Result<&mut HashMap<K, V>, StateError> {
        let meta = desc.meta();
        if !self.states.contains_key(&meta.name) {
            let mut map = TypedMap::<K, V>(HashMap::new());
            if let Some(r) = self.restored.remove(&meta.name) {
                if r.fingerprint != meta.fingerprint {
                    let err = StateError::SchemaMismatch {
                        operator: self.operator.clone(),
                        state: meta.name.clone(),
                        expected: meta.type_desc.clone(),
                        found: r.type_desc.clone(),
                    };
                    self.restored.insert(meta.name.clone(), r);
                    return Err(err);
                }
                map.0 = postcard::from_bytes(&r.bytes).map_err(|e| StateError::Serde {
                    operator: self.operator.clone(),
                    state: meta.name.clone(),
                    source: e.into(),
                })?;
            }
            self.states.insert(
                meta.name.clone(),
                Registered {
                    meta: meta.clone(),
                    map: Box::new(map),
                },
            );
        }
        let reg = self
            .states
            .get_mut(&meta.name)
            .expect("registered just above");
        let typed = if reg.meta.fingerprint == meta.fingerprint {
            reg.map.as_any_mut().downcast_mut::<TypedMap<K, V>>()
        } else {
            None
        };
        match typed {
            Some(m) => Ok(&mut m.0),
            None => Err(StateError::SchemaMismatch {
                operator: self.operator.clone(),
                state: meta.name.clone(),
                expected: meta.type_desc.clone(),
                found: reg.meta.type_desc.clone(),
            }),
        }
    }

    /// The broadcast state named by `desc`, for reading and writing;
    /// registered on first use (and filled with what was restored for it).
    pub fn state<K: StateValue + Hash + Eq, V: StateValue>(
        &mut self,
        desc: &MapStateDescriptor<K, V>,
    ) -> Result<BroadcastState<'_, K, V>, StateError> {
        Ok(BroadcastState {
            map: self.map(desc)?,
        })
    }

    /// The broadcast state named by `desc`, for reading only.
    pub fn read_only<K: StateValue + Hash + Eq, V: StateValue>(
        &mut self,
        desc: &MapStateDescriptor<K, V>,
    ) -> Result<ReadOnlyBroadcastState<'_, K, V>, StateError> {
        Ok(ReadOnlyBroadcastState {
            map: self.map(desc)?,
        })
    }

    /// Encodes every state as subtask `subtask`'s copy: one entry per state
    /// (restored states never used are carried unchanged).
    pub fn snapshot(&self, subtask: u32) -> Result<Vec<Vec<u8>>, StateError> {
        let serde = |state: &str, e: postcard::Error| StateError::Serde {
            operator: self.operator.clone(),
            state: state.to_string(),
            source: e.into(),
        };
        let mut out = Vec::with_capacity(self.states.len() + self.restored.len());
        for reg in self.states.values() {
            let m = &reg.meta;
            let header: Header<'_> = (subtask, &m.name, &m.type_desc, m.fingerprint);
            let entry = postcard::to_extend(&header, BROADCAST_MAGIC.to_vec())
                .and_then(|e| reg.map.encode(e))
                .map_err(|e| serde(&m.name, e))?;
            out.push(entry);
        }
        for (name, r) in &self.restored {
            let header: Header<'_> = (subtask, name, &r.type_desc, r.fingerprint);
            let mut entry = postcard::to_extend(&header, BROADCAST_MAGIC.to_vec())
                .map_err(|e| serde(name, e))?;
            entry.extend_from_slice(&r.bytes);
            out.push(entry);
        }
        out.sort();
        Ok(out)
    }

    /// Replaces every state with the copy new subtask `subtask` takes from
    /// the union of all former subtasks' `entries` (the `subtask mod n`-th
    /// of the `n` former subtasks that had broadcast state). Other entries
    /// are ignored. States are decoded when their descriptor is next used.
    pub fn restore(&mut self, entries: &[Vec<u8>], subtask: u32) -> Result<(), StateError> {
        self.states.clear();
        self.restored.clear();
        let parsed: Vec<_> = entries.iter().filter_map(|e| parse(e)).collect();
        let former: Vec<u32> = parsed
            .iter()
            .map(|((s, ..), _)| *s)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if former.is_empty() {
            return Ok(());
        }
        let from = former[subtask as usize % former.len()];
        for ((s, name, type_desc, fingerprint), bytes) in parsed {
            if s != from {
                continue;
            }
            self.restored.insert(
                name.to_string(),
                Restored {
                    type_desc: type_desc.to_string(),
                    fingerprint,
                    bytes: bytes.to_vec(),
                },
            );
        }
        Ok(())
    }
}

/// A broadcast state for reading and writing, in
/// `process_broadcast_element`.
pub struct BroadcastState<'s, K, V> {
    map: &'s mut HashMap<K, V>,
}

impl<K: Hash + Eq, V> BroadcastState<'_, K, V> {
    /// The value of `key`.
    pub fn get(&self, key: &K) -> Option<&V> {
        self.map.get(key)
    }

    /// Whether `key` has a value.
    pub fn contains(&self, key: &K) -> bool {
        self.map.contains_key(key)
    }

    /// Sets the value of `key`, returning the previous one.
    pub fn put(&mut self, key: K, value: V) -> Option<V> {
        self.map.insert(key, value)
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        self.map.remove(key)
    }

    /// The entries, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.map.iter()
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether there is no entry.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Removes every entry.
    pub fn clear(&mut self) {
        self.map.clear();
    }
}

/// A broadcast state for reading only, in `process_element`: the
/// non-broadcast input must not change it, or the copies of the subtasks
/// would diverge.
pub struct ReadOnlyBroadcastState<'s, K, V> {
    map: &'s HashMap<K, V>,
}

impl<K: Hash + Eq, V> ReadOnlyBroadcastState<'_, K, V> {
    /// The value of `key`.
    pub fn get(&self, key: &K) -> Option<&V> {
        self.map.get(key)
    }

    /// Whether `key` has a value.
    pub fn contains(&self, key: &K) -> bool {
        self.map.contains_key(key)
    }

    /// The entries, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.map.iter()
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether there is no entry.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_new_subtask_takes_one_former_copy() {
        let d = MapStateDescriptor::<u32, String>::new("m");
        let mut union = Vec::new();
        for s in 0..2u32 {
            let mut store = BroadcastStateStore::new("op");
            store.state(&d).unwrap().put(s, format!("copy {s}"));
            union.extend(store.snapshot(s).unwrap());
        }
        for (new, from) in [(0u32, 0u32), (1, 1), (2, 0)] {
            let mut r = BroadcastStateStore::new("op");
            r.restore(&union, new).unwrap();
            let st = r.read_only(&d).unwrap();
            assert_eq!(st.len(), 1);
            assert_eq!(st.get(&from), Some(&format!("copy {from}")));
        }
    }

    #[test]
    fn restore_with_other_types_is_a_schema_mismatch() {
        let d = MapStateDescriptor::<u32, String>::new("m");
        let mut store = BroadcastStateStore::new("op");
        store.state(&d).unwrap().put(1, "x".into());
        let entries = store.snapshot(0).unwrap();
        let mut r = BroadcastStateStore::new("op");
        r.restore(&entries, 0).unwrap();
        // Unused: carried unchanged (apart from the subtask).
        assert_eq!(r.snapshot(0).unwrap(), entries);
        let other = MapStateDescriptor::<u32, u64>::new("m");
        let err = r.read_only(&other).err().unwrap();
        assert!(matches!(err, StateError::SchemaMismatch { .. }), "{err}");
        assert!(err.to_string().contains("'op'") && err.to_string().contains("'m'"));
        assert_eq!(r.read_only(&d).unwrap().get(&1), Some(&"x".to_string()));
    }
}
