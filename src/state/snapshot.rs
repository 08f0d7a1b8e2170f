//! State snapshots: a cheap synchronous capture, then serialization per key
//! group.
//!
//! [`StateBackend::snapshot`](super::StateBackend::snapshot) returns a
//! [`Snapshot`] holding shared references to every state's key-group maps (no
//! value is copied). [`Snapshot::serialize`], which may run on another thread
//! while processing goes on, writes one [`KeyGroupBytes`] per key group of the
//! subtask's range: a postcard-encoded [`KeyGroupState`] — the format version
//! and, per state with entries in that group, its name, type description,
//! fingerprint and its `(key, stamped value)` pairs, themselves postcard bytes.
//! Because the unit is the key group, a later restore at another parallelism
//! hands each subtask the groups of its new range.

use super::FORMAT_VERSION;
use super::descriptor::StateMeta;
use super::error::StateError;
use serde::{Deserialize, Serialize};
use std::ops::Range;
use std::sync::Arc;

/// One state's capture, serialized per key group in the asynchronous part.
pub trait CapturedState: Send {
    /// The state's identity.
    fn meta(&self) -> &StateMeta;
    /// The postcard bytes of the state's entries in `key_group`, or `None`
    /// when it has none.
    fn group_bytes(&self, key_group: u32) -> Result<Option<Vec<u8>>, StateError>;
}

/// The serialized state of one key group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyGroupBytes {
    /// The key group.
    pub key_group: u32,
    /// A postcard-encoded [`KeyGroupState`].
    pub bytes: Vec<u8>,
}

/// What [`KeyGroupBytes::bytes`] decodes to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyGroupState {
    /// [`FORMAT_VERSION`] of the writer.
    pub version: u32,
    /// The states with entries in this key group.
    pub states: Vec<StateBlob>,
}

/// One state's entries in one key group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateBlob {
    /// The state's name.
    pub name: String,
    /// Its kind and types, e.g. `Value<u64>`.
    pub type_desc: String,
    /// Its fingerprint (see [`StateMeta`]).
    pub fingerprint: u64,
    /// postcard bytes of a sequence of `(key, Stamped<value>)`.
    pub data: Vec<u8>,
}

/// Restored bytes of a state not registered since the restore; carried into
/// later snapshots unchanged.
#[derive(Clone, Debug)]
pub(crate) struct PendingBlob {
    pub key_group: u32,
    pub type_desc: String,
    pub fingerprint: u64,
    pub data: Arc<[u8]>,
}

/// The synchronous part of a snapshot; [`serialize`](Self::serialize) is the
/// asynchronous part.
pub struct Snapshot {
    pub(crate) operator: String,
    pub(crate) key_groups: Range<u32>,
    pub(crate) states: Vec<Box<dyn CapturedState>>,
    pub(crate) pending: Vec<(String, PendingBlob)>,
}

impl Snapshot {
    /// The key groups this snapshot covers.
    pub fn key_groups(&self) -> Range<u32> {
        self.key_groups.clone()
    }

    /// Serializes the capture: one entry per key group of the range, in order.
    pub fn serialize(self) -> Result<Vec<KeyGroupBytes>, StateError> {
        let mut out = Vec::with_capacity(self.key_groups.len());
        for kg in self.key_groups.clone() {
            let mut states = Vec::new();
            for s in &self.states {
                if let Some(data) = s.group_bytes(kg)? {
                    let meta = s.meta();
                    states.push(StateBlob {
                        name: meta.name.clone(),
                        type_desc: meta.type_desc.clone(),
                        fingerprint: meta.fingerprint,
                        data,
                    });
                }
            }
            for (name, p) in self.pending.iter().filter(|(_, p)| p.key_group == kg) {
                states.push(StateBlob {
                    name: name.clone(),
                    type_desc: p.type_desc.clone(),
                    fingerprint: p.fingerprint,
                    data: p.data.to_vec(),
                });
            }
            let state = KeyGroupState {
                version: FORMAT_VERSION,
                states,
            };
            let bytes = postcard::to_allocvec(&state).map_err(|e| StateError::Serde {
                operator: self.operator.clone(),
                state: String::new(),
                message: e.to_string(),
            })?;
            out.push(KeyGroupBytes {
                key_group: kg,
                bytes,
            });
        }
        Ok(out)
    }
}

/// Restored blobs of states not registered yet, by state name.
pub(crate) type PendingBlobs = rustc_hash::FxHashMap<String, Vec<PendingBlob>>;

/// The error for a state whose registered type differs from `found`.
pub(crate) fn schema_mismatch(operator: &str, meta: &StateMeta, found: &str) -> StateError {
    StateError::SchemaMismatch {
        operator: operator.to_string(),
        state: meta.name.clone(),
        expected: meta.type_desc.clone(),
        found: found.to_string(),
    }
}

/// Pending blobs in a deterministic order (by state name).
pub(crate) fn sorted_pending(pending: &PendingBlobs) -> Vec<(String, PendingBlob)> {
    let mut all: Vec<(String, PendingBlob)> = pending
        .iter()
        .flat_map(|(name, blobs)| blobs.iter().map(|b| (name.clone(), b.clone())))
        .collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all
}

/// Decodes and checks every key group, then installs them into `tables`
/// (states not registered yet wait in `pending`). Shared by every backend so
/// that a snapshot restores the same way into each.
pub(crate) fn restore_into<K>(
    operator: &str,
    range: &Range<u32>,
    tables: &mut rustc_hash::FxHashMap<String, Box<dyn super::StateTable<K>>>,
    pending: &mut PendingBlobs,
    groups: &[KeyGroupBytes],
) -> Result<(), StateError> {
    // Decode and check everything before changing anything.
    let mut decoded = Vec::with_capacity(groups.len());
    for g in groups {
        if !range.contains(&g.key_group) {
            return Err(StateError::KeyGroupOutOfRange {
                operator: operator.to_string(),
                key_group: g.key_group,
                start: range.start,
                end: range.end,
            });
        }
        let state: KeyGroupState =
            postcard::from_bytes(&g.bytes).map_err(|e| StateError::Serde {
                operator: operator.to_string(),
                state: String::new(),
                message: e.to_string(),
            })?;
        if state.version != FORMAT_VERSION {
            return Err(StateError::FormatVersion {
                operator: operator.to_string(),
                found: state.version,
                expected: FORMAT_VERSION,
            });
        }
        for blob in &state.states {
            if let Some(t) = tables.get(&blob.name)
                && t.meta().fingerprint != blob.fingerprint
            {
                return Err(schema_mismatch(operator, t.meta(), &blob.type_desc));
            }
        }
        decoded.push((g.key_group, state));
    }
    for t in tables.values_mut() {
        t.clear_all();
    }
    pending.clear();
    for (kg, state) in decoded {
        for blob in state.states {
            match tables.get_mut(&blob.name) {
                Some(t) => t.restore_group(kg, &blob.data)?,
                None => pending.entry(blob.name).or_default().push(PendingBlob {
                    key_group: kg,
                    type_desc: blob.type_desc,
                    fingerprint: blob.fingerprint,
                    data: blob.data.into(),
                }),
            }
        }
    }
    Ok(())
}

/// The table of the state `meta`: the registered one after checking its type,
/// or a new one from `create`, filled from restored blobs that waited for it.
/// Shared by every backend so registration checks are the same everywhere.
pub(crate) fn register_table<'t, K>(
    operator: &str,
    tables: &'t mut rustc_hash::FxHashMap<String, Box<dyn super::StateTable<K>>>,
    pending: &mut PendingBlobs,
    meta: &StateMeta,
    table_type: std::any::TypeId,
    create: &mut dyn FnMut(&str) -> Box<dyn super::StateTable<K>>,
) -> Result<&'t mut dyn super::StateTable<K>, StateError> {
    if let Some(t) = tables.get(&meta.name) {
        if t.meta().fingerprint != meta.fingerprint || t.table_type() != table_type {
            return Err(schema_mismatch(operator, meta, &t.meta().type_desc));
        }
    } else {
        let mut table = create(operator);
        if table.table_type() != table_type {
            return Err(schema_mismatch(operator, meta, "another Rust type"));
        }
        if let Some(blobs) = pending.get(&meta.name) {
            if let Some(b) = blobs.iter().find(|b| b.fingerprint != meta.fingerprint) {
                return Err(schema_mismatch(operator, meta, &b.type_desc));
            }
            for b in blobs {
                table.restore_group(b.key_group, &b.data)?;
            }
            pending.remove(&meta.name);
        }
        tables.insert(meta.name.clone(), table);
    }
    match tables.get_mut(&meta.name) {
        Some(t) => Ok(t.as_mut()),
        None => Err(StateError::SchemaMismatch {
            operator: operator.to_string(),
            state: meta.name.clone(),
            expected: meta.type_desc.clone(),
            found: "nothing".into(),
        }),
    }
}
