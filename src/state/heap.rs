//! The heap state backend: every state in memory, per key group.
//!
//! State lives in typed, copy-on-write tables (see [`TypedTable`]), one per
//! registered state name, each holding a map per key group of the subtask's
//! range — so the layout is (state name, key group, key). Values are kept as
//! Rust values, not bytes: reads and writes cost a hash lookup and no
//! serialization; serialization happens only in a snapshot's asynchronous
//! part. Restored bytes of a state wait, still serialized, until a descriptor
//! registers that state and its fingerprint has been checked.
//!
//! [`TypedTable`]: super::table::TypedTable

use super::descriptor::StateMeta;
use super::error::StateError;
use super::snapshot::{
    KeyGroupBytes, PendingBlob, Snapshot, register_table, restore_into, sorted_pending,
};
use super::{StateBackend, StateTable};
use crate::time::{Clock, SystemClock};
use floe_actors::element::Timestamp;
use floe_actors::keygroup::{DEFAULT_MAX_PARALLELISM, key_group_range};
use rustc_hash::FxHashMap;
use std::any::TypeId;
use std::ops::Range;
use std::sync::Arc;

/// Keyed state in memory, for the key groups of one subtask.
///
/// # Examples
/// ```
/// use floe::state::{HeapStateBackend, KeyScope, StateBackend, ValueStateDescriptor};
///
/// let mut backend = HeapStateBackend::<String>::new("counter", 128, 0..128);
/// let desc = ValueStateDescriptor::<u64>::new("count");
/// let key = "a".to_string();
/// KeyScope::new(&mut backend, &key).value_state(&desc)?.update(3)?;
/// let snapshot = backend.snapshot().serialize()?;
///
/// let mut restored = HeapStateBackend::<String>::new("counter", 128, 0..128);
/// restored.restore(&snapshot)?;
/// let v = KeyScope::new(&mut restored, &key).value_state(&desc)?.value()?;
/// assert_eq!(v, Some(3));
/// # Ok::<(), floe::state::StateError>(())
/// ```
pub struct HeapStateBackend<K> {
    operator: String,
    max_parallelism: u32,
    range: Range<u32>,
    clock: Arc<dyn Clock>,
    tables: FxHashMap<String, Box<dyn StateTable<K>>>,
    pending: FxHashMap<String, Vec<PendingBlob>>,
}

impl<K: Send + 'static> HeapStateBackend<K> {
    /// A backend of `operator` owning the key groups `range` of
    /// `max_parallelism`, with the system clock for TTL.
    pub fn new(operator: impl Into<String>, max_parallelism: u32, range: Range<u32>) -> Self {
        HeapStateBackend {
            operator: operator.into(),
            max_parallelism,
            range,
            clock: Arc::new(SystemClock),
            tables: FxHashMap::default(),
            pending: FxHashMap::default(),
        }
    }

    /// The backend of subtask `subtask` of `parallelism`.
    pub fn for_subtask(
        operator: impl Into<String>,
        max_parallelism: u32,
        subtask: u32,
        parallelism: u32,
    ) -> Self {
        let range = key_group_range(subtask, max_parallelism, parallelism.max(1));
        Self::new(operator, max_parallelism, range)
    }

    /// A single-subtask backend owning all [`DEFAULT_MAX_PARALLELISM`] groups.
    pub fn single(operator: impl Into<String>) -> Self {
        Self::new(
            operator,
            DEFAULT_MAX_PARALLELISM,
            0..DEFAULT_MAX_PARALLELISM,
        )
    }

    /// Uses `clock` for TTL (a [`ManualClock`](crate::time::ManualClock) in tests).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }
}

impl<K: Send + 'static> StateBackend<K> for HeapStateBackend<K> {
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
        let mut states: Vec<_> = self.tables.values_mut().map(|t| t.capture()).collect();
        // A deterministic order of states within a key group's bytes.
        states.sort_by(|a, b| a.meta().name.cmp(&b.meta().name));
        Snapshot {
            operator: self.operator.clone(),
            key_groups: self.range.clone(),
            states,
            pending: sorted_pending(&self.pending),
            base: None,
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

    fn state_size(&self) -> floe_actors::metrics::StateSize {
        floe_actors::metrics::StateSize {
            entries: self.tables.values().map(|t| t.len() as u64).sum(),
            bytes: self.tables.values().map(|t| t.mem_bytes()).sum(),
        }
    }
}
