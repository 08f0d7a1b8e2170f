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
//!
//! **Incremental snapshots.** A backend that tracks its changes (the redb
//! backend) may return a [`Snapshot`] with a [`base`](Snapshot::base): the
//! id of an earlier, completed checkpoint it builds on. Its bytes are then a
//! [`KeyGroupChanges`] per key group — per state, the entries written since
//! that checkpoint and the keys removed — and a restore applies the base's
//! key groups first, then each delta in order (several entries for the same
//! key group, oldest first). The two formats are told apart by their first
//! field: [`FORMAT_VERSION`] for a full group, [`DELTA_VERSION`] for changes.

use super::FORMAT_VERSION;
use super::descriptor::StateMeta;
use super::error::StateError;
use floe_actors::ids::CheckpointId;
use floe_actors::snapshot::BlobRef;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};

/// The first field of a [`KeyGroupChanges`]: [`FORMAT_VERSION`] with the
/// high bit set, so that it is never mistaken for a full group's version.
pub const DELTA_VERSION: u32 = 0x8000_0000 | FORMAT_VERSION;

/// A state's changes in one key group: `(puts, removed)`, see
/// [`CapturedState::group_delta`].
pub type GroupDelta = (Vec<u8>, Vec<u8>);

/// One state's capture, serialized per key group in the asynchronous part.
pub trait CapturedState: Send {
    /// The state's identity.
    fn meta(&self) -> &StateMeta;
    /// The postcard bytes of the state's entries in `key_group`, or `None`
    /// when it has none.
    fn group_bytes(&self, key_group: u32) -> Result<Option<Vec<u8>>, StateError>;
    /// For a capture of an incremental snapshot: the state's changes in
    /// `key_group` since the base, as `(puts, removed)` — postcard bytes of a
    /// sequence of `(key, Stamped<value>)` and of a sequence of keys — or
    /// `None` when nothing changed there.
    fn group_delta(&self, _key_group: u32) -> Result<Option<GroupDelta>, StateError> {
        Ok(None)
    }
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

/// What [`KeyGroupBytes::bytes`] of an incremental snapshot decodes to (and
/// of a full snapshot whose key group holds restored, not yet registered
/// changes): per state, in order, what to do with its entries in the group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyGroupChanges {
    /// [`DELTA_VERSION`] of the writer.
    pub version: u32,
    /// Applied in order.
    pub changes: Vec<StateChange>,
}

/// One state's change in one key group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateChange {
    /// The state's name.
    pub name: String,
    /// Its kind and types.
    pub type_desc: String,
    /// Its fingerprint.
    pub fingerprint: u64,
    /// What changed.
    pub change: Change,
}

/// How a state's entries in a key group change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Change {
    /// They become these (postcard bytes of `(key, Stamped<value>)` pairs).
    Replace(Vec<u8>),
    /// These entries are written (`puts`, as in `Replace`) and these keys
    /// removed (`removed`, postcard bytes of a sequence of keys).
    Apply {
        /// Written entries.
        puts: Vec<u8>,
        /// Removed keys.
        removed: Vec<u8>,
    },
}

/// Restored bytes of a state not registered since the restore; carried into
/// later snapshots unchanged.
#[derive(Clone, Debug)]
pub(crate) struct PendingBlob {
    pub key_group: u32,
    pub type_desc: String,
    pub fingerprint: u64,
    /// The entries (a full group), or the written entries of a delta.
    pub data: Arc<[u8]>,
    /// `Some`: a delta, removing these keys.
    pub removed: Option<Arc<[u8]>>,
}

/// The synchronous part of a snapshot; [`serialize`](Self::serialize) is the
/// asynchronous part.
pub struct Snapshot {
    pub(crate) operator: String,
    pub(crate) key_groups: Range<u32>,
    pub(crate) states: Vec<Box<dyn CapturedState>>,
    pub(crate) pending: Vec<(String, PendingBlob)>,
    /// `Some(checkpoint)`: incremental, relative to that completed checkpoint.
    pub(crate) base: Option<u64>,
}

impl Snapshot {
    /// The key groups this snapshot covers.
    pub fn key_groups(&self) -> Range<u32> {
        self.key_groups.clone()
    }

    /// `Some(checkpoint)` when the snapshot is incremental: its bytes hold
    /// only the changes since that completed checkpoint, and restoring it
    /// needs that checkpoint's keyed state first (see
    /// [`StateBackend::snapshot_for`](super::StateBackend::snapshot_for)).
    pub fn base(&self) -> Option<u64> {
        self.base
    }

    fn serde_error(&self, e: postcard::Error) -> StateError {
        StateError::Serde {
            operator: self.operator.clone(),
            state: String::new(),
            source: e.into(),
        }
    }

    /// Serializes the capture: one entry per key group of the range, in order
    /// (a delta for each group when the snapshot is incremental).
    pub fn serialize(self) -> Result<Vec<KeyGroupBytes>, StateError> {
        if self.base.is_some() {
            return self.serialize_delta();
        }
        let mut out = Vec::with_capacity(self.key_groups.len());
        for kg in self.key_groups.clone() {
            if self
                .pending
                .iter()
                .any(|(_, p)| p.key_group == kg && p.removed.is_some())
            {
                out.push(self.group_with_pending_changes(kg)?);
                continue;
            }
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
                // No delta here: every pending blob of the group is whole.
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
            let bytes = postcard::to_allocvec(&state).map_err(|e| self.serde_error(e))?;
            out.push(KeyGroupBytes {
                key_group: kg,
                bytes,
            });
        }
        Ok(out)
    }

    /// A full key group holding restored changes of a state not registered
    /// yet: the same content as a full group, as a list of changes.
    fn group_with_pending_changes(&self, kg: u32) -> Result<KeyGroupBytes, StateError> {
        let mut changes = Vec::new();
        for s in &self.states {
            if let Some(data) = s.group_bytes(kg)? {
                let meta = s.meta();
                changes.push(StateChange {
                    name: meta.name.clone(),
                    type_desc: meta.type_desc.clone(),
                    fingerprint: meta.fingerprint,
                    change: Change::Replace(data),
                });
            }
        }
        for (name, p) in self.pending.iter().filter(|(_, p)| p.key_group == kg) {
            changes.push(StateChange {
                name: name.clone(),
                type_desc: p.type_desc.clone(),
                fingerprint: p.fingerprint,
                change: match &p.removed {
                    None => Change::Replace(p.data.to_vec()),
                    Some(r) => Change::Apply {
                        puts: p.data.to_vec(),
                        removed: r.to_vec(),
                    },
                },
            });
        }
        let state = KeyGroupChanges {
            version: DELTA_VERSION,
            changes,
        };
        let bytes = postcard::to_allocvec(&state).map_err(|e| self.serde_error(e))?;
        Ok(KeyGroupBytes {
            key_group: kg,
            bytes,
        })
    }

    /// The changes since the base: one entry per key group of the range (an
    /// empty list where nothing changed).
    fn serialize_delta(self) -> Result<Vec<KeyGroupBytes>, StateError> {
        let mut out = Vec::with_capacity(self.key_groups.len());
        for kg in self.key_groups.clone() {
            let mut changes = Vec::new();
            for s in &self.states {
                if let Some((puts, removed)) = s.group_delta(kg)? {
                    let meta = s.meta();
                    changes.push(StateChange {
                        name: meta.name.clone(),
                        type_desc: meta.type_desc.clone(),
                        fingerprint: meta.fingerprint,
                        change: Change::Apply { puts, removed },
                    });
                }
            }
            let state = KeyGroupChanges {
                version: DELTA_VERSION,
                changes,
            };
            let bytes = postcard::to_allocvec(&state).map_err(|e| self.serde_error(e))?;
            out.push(KeyGroupBytes {
                key_group: kg,
                bytes,
            });
        }
        Ok(out)
    }
}

/// The keyed-state blobs of an operator's checkpoints, for incremental
/// snapshots: which blobs a snapshot builds on.
///
/// The operator records, per checkpoint it snapshotted, the blobs its keyed
/// state was written to ([`persisted`](Self::persisted), called once they
/// are written), and promotes them when the checkpoint completes
/// ([`complete`](Self::complete)); a later incremental snapshot builds on
/// the blobs of the last completed one ([`base_blobs`](Self::base_blobs)).
/// Cloning shares the record.
#[derive(Clone, Default)]
pub struct CheckpointChain {
    inner: Arc<Mutex<ChainInner>>,
}

#[derive(Default)]
struct ChainInner {
    written: BTreeMap<CheckpointId, Vec<BlobRef>>,
    completed: Option<(CheckpointId, Vec<BlobRef>)>,
}

impl CheckpointChain {
    fn lock(&self) -> std::sync::MutexGuard<'_, ChainInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records that the keyed state of `checkpoint` was written to `blobs`
    /// (its base's blobs first, oldest first).
    pub fn persisted(&self, checkpoint: CheckpointId, blobs: &[BlobRef]) {
        self.lock().written.insert(checkpoint, blobs.to_vec());
    }

    /// Checkpoint `checkpoint` completed: its blobs become the base of later
    /// snapshots. Returns whether its blobs were known (only then may the
    /// backend build on it).
    pub fn complete(&self, checkpoint: CheckpointId) -> bool {
        let mut inner = self.lock();
        let Some(blobs) = inner.written.remove(&checkpoint) else {
            return false;
        };
        inner.written.retain(|&c, _| c > checkpoint);
        inner.completed = Some((checkpoint, blobs));
        true
    }

    /// Checkpoint `checkpoint` was aborted: its blobs are never a base.
    pub fn abort(&self, checkpoint: CheckpointId) {
        self.lock().written.remove(&checkpoint);
    }

    /// The blobs of completed checkpoint `checkpoint`, if it is the last one
    /// completed.
    pub fn base_blobs(&self, checkpoint: CheckpointId) -> Option<Vec<BlobRef>> {
        match &self.lock().completed {
            Some((c, blobs)) if *c == checkpoint => Some(blobs.clone()),
            _ => None,
        }
    }

    /// Forgets everything (after a restore, snapshots start over in full).
    pub fn reset(&self) {
        *self.lock() = ChainInner::default();
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

/// One key group's entries decoded: per state, in order, its change.
fn decode_group(operator: &str, bytes: &[u8]) -> Result<Vec<StateChange>, StateError> {
    let serde = |e: postcard::Error| StateError::Serde {
        operator: operator.to_string(),
        state: String::new(),
        source: e.into(),
    };
    let (version, _) = postcard::take_from_bytes::<u32>(bytes).map_err(serde)?;
    match version {
        FORMAT_VERSION => {
            let state: KeyGroupState = postcard::from_bytes(bytes).map_err(serde)?;
            Ok(state
                .states
                .into_iter()
                .map(|b| StateChange {
                    name: b.name,
                    type_desc: b.type_desc,
                    fingerprint: b.fingerprint,
                    change: Change::Replace(b.data),
                })
                .collect())
        }
        DELTA_VERSION => {
            let state: KeyGroupChanges = postcard::from_bytes(bytes).map_err(serde)?;
            Ok(state.changes)
        }
        found => Err(StateError::FormatVersion {
            operator: operator.to_string(),
            found,
            expected: FORMAT_VERSION,
        }),
    }
}

/// Decodes and checks every key group, then installs them into `tables`
/// (states not registered yet wait in `pending`). Shared by every backend so
/// that a snapshot restores the same way into each. A key group may appear
/// several times (a base, then deltas): its entries apply in order.
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
        let changes = decode_group(operator, &g.bytes)?;
        for c in &changes {
            if let Some(t) = tables.get(&c.name)
                && t.meta().fingerprint != c.fingerprint
            {
                return Err(schema_mismatch(operator, t.meta(), &c.type_desc));
            }
        }
        decoded.push((g.key_group, changes));
    }
    for t in tables.values_mut() {
        t.clear_all();
    }
    pending.clear();
    for (kg, changes) in decoded {
        for c in changes {
            match (tables.get_mut(&c.name), c.change) {
                (Some(t), Change::Replace(data)) => t.restore_group(kg, &data)?,
                (Some(t), Change::Apply { puts, removed }) => {
                    t.apply_group_delta(kg, &puts, &removed)?
                }
                (None, change) => {
                    let blobs = pending.entry(c.name).or_default();
                    let (data, removed) = match change {
                        Change::Replace(data) => {
                            // A whole group supersedes what came before.
                            blobs.retain(|b| b.key_group != kg);
                            (data, None)
                        }
                        Change::Apply { puts, removed } => (puts, Some(removed.into())),
                    };
                    blobs.push(PendingBlob {
                        key_group: kg,
                        type_desc: c.type_desc,
                        fingerprint: c.fingerprint,
                        data: data.into(),
                        removed,
                    });
                }
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
                match &b.removed {
                    None => table.restore_group(b.key_group, &b.data)?,
                    Some(removed) => table.apply_group_delta(b.key_group, &b.data, removed)?,
                }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A key group that does not decode fails with the decoder's own error
    /// as the source (not its text), and the message reads as before.
    #[test]
    fn a_bad_key_group_keeps_postcard_s_error_as_its_source() {
        let err = decode_group("Counts", &[]).expect_err("empty bytes do not decode");
        // The oracle: what postcard itself says of the same bytes.
        let expected = postcard::from_bytes::<u32>(&[]).expect_err("no version");
        assert!(matches!(err, StateError::Serde { .. }), "{err:?}");
        let source = std::error::Error::source(&err).expect("the error keeps its source");
        assert_eq!(
            source.downcast_ref::<postcard::Error>(),
            Some(&expected),
            "{source:?}"
        );
        assert_eq!(
            err.to_string(),
            format!("operator 'Counts', state '': {expected}")
        );
    }
}
