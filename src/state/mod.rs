//! Keyed state: values a keyed process function keeps per key, partitioned by
//! key group so that it can be snapshotted and redistributed.
//!
//! 1. **Descriptors** ([`ValueStateDescriptor`], [`ListStateDescriptor`],
//!    [`MapStateDescriptor`], [`ReducingStateDescriptor`],
//!    [`AggregatingStateDescriptor`]) name a state and fix its serde types and
//!    optional [`StateTtlConfig`].
//! 2. **Handles** ([`ValueState`], [`ListState`], [`MapState`],
//!    [`ReducingState`], [`AggregatingState`]) read and write the state of one
//!    key. In a keyed process function, `ctx.value_state(&desc)?` (and its
//!    siblings) returns a handle bound to the current key; outside a keyed
//!    context the same call is a [`StateError::NotKeyed`] error.
//! 3. **Key groups**: a key belongs to key group
//!    `floe_actors::keygroup::key_group(key, max_parallelism)`; a subtask owns a
//!    contiguous range of key groups and a backend stores state per key group.
//! 4. **Backends** implement [`StateBackend`]; [`HeapStateBackend`] keeps
//!    everything in memory; [`RedbStateBackend`] keeps it in an embedded
//!    redb database file per subtask. [`StateBackend::snapshot`] captures copy-on-write
//!    references synchronously; [`Snapshot::serialize`] writes postcard bytes
//!    per key group; [`StateBackend::restore`] reads them back.
//! 5. **Schema safety**: each state records a fingerprint of its kind, types
//!    and [`FORMAT_VERSION`]; registering or restoring a state with another
//!    fingerprint fails with [`StateError::SchemaMismatch`], naming the
//!    operator and the state.
//! 6. **Operator state** (non-keyed): [`OperatorStateStore`] holds a
//!    subtask's named list states, redistributed by even split or union on
//!    restore; [`BroadcastStateStore`] holds the maps a broadcast process
//!    function keeps a copy of in every subtask.
//!
//! See `docs/state.md` for the user's view.

mod aggregating;
mod broadcast;
mod descriptor;
mod error;
mod function;
mod heap;
mod list;
mod map;
pub(crate) mod operator;
mod redb;
mod reducing;
mod scope;
mod snapshot;
mod table;
mod ttl;
mod value;
pub mod window;

pub use aggregating::AggregatingState;
pub use broadcast::{BroadcastState, BroadcastStateStore, ReadOnlyBroadcastState};
pub use descriptor::{
    AggregatingStateDescriptor, ListStateDescriptor, MapStateDescriptor, ReduceFn,
    ReducingStateDescriptor, StateDescriptor, StateMeta, ValueStateDescriptor,
};
pub use error::StateError;
pub use function::{AggregateError, AggregateFunction};
pub use heap::HeapStateBackend;
pub use list::ListState;
pub use map::MapState;
pub use operator::{OperatorListState, OperatorStateEntries, OperatorStateStore, Redistribution};
pub use redb::{MAX_DELTAS, RedbStateBackend, RedbStore};
pub use reducing::ReducingState;
pub use scope::{KeyScope, for_each_entry};
pub use snapshot::{
    CapturedState, Change, CheckpointChain, DELTA_VERSION, GroupDelta, KeyGroupBytes,
    KeyGroupChanges, KeyGroupState, Snapshot, StateBlob, StateChange,
};
pub use table::{Stamped, TypedTable};
pub use ttl::{StateTtlConfig, TtlUpdateType};
pub use value::ValueState;

use floe_actors::element::Timestamp;
use floe_actors::ids::CheckpointId;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::any::{Any, TypeId};
use std::hash::Hash;
use std::ops::Range;

/// The version of the snapshot format and of the fingerprints; part of every
/// fingerprint, so a format change is also a schema change.
pub const FORMAT_VERSION: u32 = 1;

/// Which backend holds the keyed state of a keyed process function; see
/// [`KeyedStream::process_with_backend`](crate::api::keyed::KeyedStream::process_with_backend).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum StateBackendKind {
    /// [`HeapStateBackend`]: in memory (the default).
    #[default]
    Heap,
    /// [`RedbStateBackend`]: a redb database file per subtask, in `dir` as
    /// `<operator>-<subtask>.redb`, or in the system's temp directory when
    /// `dir` is `None`.
    Redb {
        /// Where the database files go.
        dir: Option<std::path::PathBuf>,
    },
}

/// What a state value must be: serde-serializable, cloneable (copy-on-write
/// snapshots) and shareable with the thread that serializes a snapshot.
pub trait StateValue: Serialize + DeserializeOwned + Clone + Send + Sync + 'static {}
impl<T> StateValue for T where T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static {}

/// What a key of keyed state must be.
pub trait StateKey: StateValue + Hash + Eq {}
impl<K> StateKey for K where K: StateValue + Hash + Eq {}

/// One registered state's storage, type-erased; the handles downcast it.
pub trait StateTable<K>: Send {
    /// The state's identity.
    fn meta(&self) -> &StateMeta;
    /// The `TypeId` of the concrete table, checked before downcasting.
    fn table_type(&self) -> TypeId;
    /// For downcasting to the concrete table.
    fn as_any_mut(&mut self) -> &mut dyn Any;
    /// The synchronous part of a snapshot of this state.
    fn capture(&mut self) -> Box<dyn CapturedState>;
    /// Replaces the state of one key group with restored bytes.
    fn restore_group(&mut self, key_group: u32, bytes: &[u8]) -> Result<(), StateError>;
    /// Applies restored changes to one key group: writes the entries `puts`
    /// (the format of [`restore_group`](Self::restore_group)) and removes
    /// the keys `removed` (postcard bytes of a sequence of keys).
    fn apply_group_delta(
        &mut self,
        key_group: u32,
        puts: &[u8],
        removed: &[u8],
    ) -> Result<(), StateError>;
    /// Drops every entry.
    fn clear_all(&mut self);
    /// Writes buffered changes to the backend's storage (a no-op in memory).
    fn flush(&mut self) -> Result<(), StateError> {
        Ok(())
    }
    /// The number of keys with a value (expired ones not yet removed included).
    fn len(&self) -> usize;
    /// Whether no key has a value.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Bytes the table's keys and values take in memory, without what they
    /// point to (0 for tables that do not keep values in memory).
    fn mem_bytes(&self) -> u64 {
        0
    }
}

/// Where keyed state lives: the states of one operator's subtask, for the key
/// groups that subtask owns.
///
/// The trait is object-safe: process contexts hold a `&mut dyn
/// StateBackend<K>`. Handles are obtained through [`KeyScope`].
pub trait StateBackend<K>: Send {
    /// The operator the state belongs to (named in errors).
    fn operator(&self) -> &str;
    /// The number of key groups.
    fn max_parallelism(&self) -> u32;
    /// The key groups this backend owns.
    fn key_group_range(&self) -> Range<u32>;
    /// The current processing time, for TTL.
    fn now(&self) -> Timestamp;
    /// The number of keys holding a value of `state` (expired values not yet
    /// removed included); 0 for an unknown state.
    fn entries(&self, state: &str) -> usize;
    /// The table of state `meta`, created with `create(operator)` on first use (and
    /// filled with restored bytes, if any). Fails when the state exists, or
    /// was restored, with another fingerprint or table type.
    fn table(
        &mut self,
        meta: &StateMeta,
        table_type: TypeId,
        create: &mut dyn FnMut(&str) -> Box<dyn StateTable<K>>,
    ) -> Result<&mut dyn StateTable<K>, StateError>;
    /// The synchronous part of a snapshot: cheap, copies no values.
    fn snapshot(&mut self) -> Snapshot;
    /// The snapshot of checkpoint `checkpoint` (of a savepoint when
    /// `savepoint`): a backend that tracks its changes may return an
    /// incremental one, holding only what changed since the last checkpoint
    /// reported by [`notify_checkpoint_complete`](Self::notify_checkpoint_complete)
    /// (see [`Snapshot::base`]); a savepoint is always full. The default is
    /// [`snapshot`](Self::snapshot), always full.
    fn snapshot_for(&mut self, checkpoint: CheckpointId, savepoint: bool) -> Snapshot {
        let _ = (checkpoint, savepoint);
        self.snapshot()
    }
    /// Checkpoint `checkpoint`, snapshotted with
    /// [`snapshot_for`](Self::snapshot_for), completed and its blobs are
    /// known: later snapshots may build on it.
    fn notify_checkpoint_complete(&mut self, _checkpoint: CheckpointId) {}
    /// Replaces all state with the serialized key groups (each must be in
    /// this backend's range); states restored but not registered yet are
    /// checked when their descriptor is first used.
    fn restore(&mut self, groups: &[KeyGroupBytes]) -> Result<(), StateError>;
    /// The redb database holding this backend's tables, if it is a
    /// [`RedbStateBackend`]; `None` (the default) means heap tables.
    fn redb_store(&self) -> Option<std::sync::Arc<RedbStore>> {
        None
    }
    /// The size of the state, for the metrics: keys holding a value summed
    /// over states, and the backend's estimate of its bytes. Cheap (no
    /// serialization), but not free: sampled once per metrics interval.
    fn state_size(&self) -> floe_actors::metrics::StateSize {
        floe_actors::metrics::StateSize::default()
    }
}
