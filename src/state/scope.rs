//! [`KeyScope`]: the state of one key in a backend, the factory of handles.
//!
//! A process context builds a scope from its backend and current key; tests
//! build one directly. Each handle method consumes the scope, so a handle
//! borrows the backend until it is dropped.

use super::redb::RedbTable;
use super::table::{KeyedTable, TypedTable};
use super::{
    AggregatingState, AggregatingStateDescriptor, ListState, ListStateDescriptor, MapState,
    MapStateDescriptor, ReducingState, ReducingStateDescriptor, StateBackend, StateDescriptor,
    StateError, StateKey, StateValue, ValueState, ValueStateDescriptor,
};
use floe_actors::element::Timestamp;
use floe_actors::keygroup::key_group;
use std::any::TypeId;
use std::borrow::Cow;
use std::hash::Hash;

/// The state of one key in one backend.
pub struct KeyScope<'s, K> {
    backend: &'s mut dyn StateBackend<K>,
    key: &'s K,
}

/// A typed table with the key's group and the time of the access.
pub(crate) struct Bound<'s, K, S> {
    pub table: &'s mut dyn KeyedTable<K, S>,
    pub key: &'s K,
    pub key_group: u32,
    pub now: Timestamp,
}

impl<'s, K: StateKey> KeyScope<'s, K> {
    /// The state of `key` in `backend`.
    pub fn new(backend: &'s mut dyn StateBackend<K>, key: &'s K) -> Self {
        KeyScope { backend, key }
    }

    fn bind<D: StateDescriptor>(self, desc: &D) -> Result<Bound<'s, K, D::Stored>, StateError> {
        let kg = key_group(self.key, self.backend.max_parallelism());
        let now = self.backend.now();
        Ok(Bound {
            table: typed_table(self.backend, desc)?,
            key: self.key,
            key_group: kg,
            now,
        })
    }

    /// The key's [`ValueState`].
    pub fn value_state<T: StateValue>(
        self,
        desc: &ValueStateDescriptor<T>,
    ) -> Result<ValueState<'s, K, T>, StateError> {
        Ok(ValueState::new(self.bind(desc)?))
    }

    /// The key's [`ListState`].
    pub fn list_state<T: StateValue>(
        self,
        desc: &ListStateDescriptor<T>,
    ) -> Result<ListState<'s, K, T>, StateError> {
        Ok(ListState::new(self.bind(desc)?))
    }

    /// The key's [`MapState`].
    pub fn map_state<UK: StateValue + Hash + Eq, UV: StateValue>(
        self,
        desc: &MapStateDescriptor<UK, UV>,
    ) -> Result<MapState<'s, K, UK, UV>, StateError> {
        Ok(MapState::new(self.bind(desc)?))
    }

    /// The key's [`ReducingState`].
    pub fn reducing_state<T: StateValue>(
        self,
        desc: &'s ReducingStateDescriptor<T>,
    ) -> Result<ReducingState<'s, K, T>, StateError> {
        Ok(ReducingState::new(self.bind(desc)?, desc.reduce.as_ref()))
    }

    /// The key's [`AggregatingState`].
    pub fn aggregating_state<IN: 'static, ACC: StateValue, OUT: 'static>(
        self,
        desc: &'s AggregatingStateDescriptor<IN, ACC, OUT>,
    ) -> Result<AggregatingState<'s, K, IN, ACC, OUT>, StateError> {
        Ok(AggregatingState::new(
            self.bind(desc)?,
            desc.function.as_ref(),
        ))
    }
}

/// Calls `f` with every key of `backend` holding a value of the state
/// `desc` (unexpired), and the value: e.g. to emit final results at end of
/// input. Keys come borrowed from the heap backend, decoded (owned) from
/// redb; the order is the backend's (by key group).
///
/// # Examples
/// ```
/// use floe::state::{for_each_entry, HeapStateBackend, KeyScope, ValueStateDescriptor};
///
/// let mut backend = HeapStateBackend::<String>::single("counter");
/// let desc = ValueStateDescriptor::<u64>::new("count");
/// for (k, n) in [("a", 1), ("b", 2)] {
///     KeyScope::new(&mut backend, &k.to_string()).value_state(&desc)?.update(n)?;
/// }
/// let mut seen = Vec::new();
/// for_each_entry(&mut backend, &desc, |k, n| {
///     seen.push((k.into_owned(), *n));
///     Ok(())
/// })?;
/// seen.sort();
/// assert_eq!(seen, vec![("a".to_string(), 1), ("b".to_string(), 2)]);
/// # Ok::<(), floe::state::StateError>(())
/// ```
pub fn for_each_entry<K: StateKey, D: StateDescriptor>(
    backend: &mut dyn StateBackend<K>,
    desc: &D,
    mut f: impl FnMut(Cow<'_, K>, &D::Stored) -> Result<(), StateError>,
) -> Result<(), StateError> {
    let now = backend.now();
    typed_table(backend, desc)?.for_each_entry(now, &mut f)
}

/// The table of `desc` in `backend`, typed (created on first use).
pub(crate) fn typed_table<'b, K: StateKey, D: StateDescriptor>(
    backend: &'b mut dyn StateBackend<K>,
    desc: &D,
) -> Result<&'b mut dyn KeyedTable<K, D::Stored>, StateError> {
    let meta = desc.meta();
    let ttl = desc.ttl().cloned();
    let range = backend.key_group_range();
    let store = backend.redb_store();
    let table_type = match store {
        None => TypeId::of::<TypedTable<K, D::Stored>>(),
        Some(_) => TypeId::of::<RedbTable<K, D::Stored>>(),
    };
    let table = backend.table(meta, table_type, &mut |operator| match &store {
        None => Box::new(TypedTable::<K, D::Stored>::new(
            meta.clone(),
            operator,
            ttl.clone(),
            range.clone(),
        )),
        Some(store) => Box::new(RedbTable::<K, D::Stored>::new(
            meta.clone(),
            operator,
            ttl.clone(),
            range.clone(),
            store.clone(),
        )),
    })?;
    let any = table.as_any_mut();
    let table: &mut dyn KeyedTable<K, D::Stored> = if any.is::<TypedTable<K, D::Stored>>() {
        any.downcast_mut::<TypedTable<K, D::Stored>>()
            .expect("checked")
    } else {
        any.downcast_mut::<RedbTable<K, D::Stored>>()
            .ok_or_else(|| StateError::SchemaMismatch {
                operator: String::new(),
                state: meta.name.clone(),
                expected: meta.type_desc.clone(),
                found: "another Rust type".into(),
            })?
    };
    Ok(table)
}
