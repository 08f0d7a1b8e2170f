//! State descriptors: the name and types of a state, and its TTL.
//!
//! A descriptor is created once (typically a field of the process function)
//! and used on every access; the backend registers the state on first use and
//! records a fingerprint of its types (see [`StateMeta`]), so state restored
//! from a snapshot with different types is refused instead of misread.

use super::AggregateFunction;
use super::ttl::StateTtlConfig;
use super::{FORMAT_VERSION, StateValue};
use floe_actors::keygroup::stable_hash;
use std::collections::HashMap;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::{Arc, OnceLock};

/// The identity of a registered state: its name, a readable description of
/// its types, and a fingerprint of that description and the format version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateMeta {
    /// The state's name, unique within its operator.
    pub name: String,
    /// The kind and types, e.g. `Value<u64>`.
    pub type_desc: String,
    /// `stable_hash((FORMAT_VERSION, type_desc))`.
    pub fingerprint: u64,
}

impl StateMeta {
    /// The meta of a state with this name and type description.
    pub fn new(name: &str, type_desc: String) -> Self {
        let fingerprint = stable_hash(&(FORMAT_VERSION, type_desc.as_str()));
        StateMeta {
            name: name.to_string(),
            type_desc,
            fingerprint,
        }
    }
}

/// What every descriptor tells the backend.
pub trait StateDescriptor {
    /// What the backend stores per key.
    type Stored: StateValue;
    /// The state's name.
    fn name(&self) -> &str;
    /// The kind and types, e.g. `Value<u64>` (from `std::any::type_name`).
    fn type_description(&self) -> String;
    /// The TTL, if values expire.
    fn ttl(&self) -> Option<&StateTtlConfig>;
    /// The name, type description and fingerprint, computed once.
    fn meta(&self) -> &StateMeta;
}

fn tn<T: ?Sized>() -> &'static str {
    std::any::type_name::<T>()
}

macro_rules! common {
    () => {
        /// The state's name.
        pub fn name(&self) -> &str {
            &self.name
        }

        /// Makes values expire `ttl` after their last refresh.
        pub fn with_ttl(mut self, ttl: StateTtlConfig) -> Self {
            self.ttl = Some(ttl);
            self
        }
    };
}

/// Describes a [`ValueState<T>`](super::ValueState): one value per key.
#[derive(Clone, Debug)]
pub struct ValueStateDescriptor<T> {
    name: String,
    ttl: Option<StateTtlConfig>,
    meta: OnceLock<StateMeta>,
    _t: PhantomData<fn() -> T>,
}

impl<T> ValueStateDescriptor<T> {
    /// A value state named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        ValueStateDescriptor {
            name: name.into(),
            ttl: None,
            meta: OnceLock::new(),
            _t: PhantomData,
        }
    }
    common!();
}

impl<T: StateValue> StateDescriptor for ValueStateDescriptor<T> {
    type Stored = T;
    fn name(&self) -> &str {
        &self.name
    }
    fn type_description(&self) -> String {
        format!("Value<{}>", tn::<T>())
    }
    fn ttl(&self) -> Option<&StateTtlConfig> {
        self.ttl.as_ref()
    }
    fn meta(&self) -> &StateMeta {
        self.meta
            .get_or_init(|| StateMeta::new(&self.name, self.type_description()))
    }
}

/// Describes a [`ListState<T>`](super::ListState): a list per key.
#[derive(Clone, Debug)]
pub struct ListStateDescriptor<T> {
    name: String,
    ttl: Option<StateTtlConfig>,
    meta: OnceLock<StateMeta>,
    _t: PhantomData<fn() -> T>,
}

impl<T> ListStateDescriptor<T> {
    /// A list state named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        ListStateDescriptor {
            name: name.into(),
            ttl: None,
            meta: OnceLock::new(),
            _t: PhantomData,
        }
    }
    common!();
}

impl<T: StateValue> StateDescriptor for ListStateDescriptor<T> {
    type Stored = Vec<T>;
    fn name(&self) -> &str {
        &self.name
    }
    fn type_description(&self) -> String {
        format!("List<{}>", tn::<T>())
    }
    fn ttl(&self) -> Option<&StateTtlConfig> {
        self.ttl.as_ref()
    }
    fn meta(&self) -> &StateMeta {
        self.meta
            .get_or_init(|| StateMeta::new(&self.name, self.type_description()))
    }
}

/// Describes a [`MapState<K, V>`](super::MapState): a map per key.
#[derive(Clone, Debug)]
pub struct MapStateDescriptor<K, V> {
    name: String,
    ttl: Option<StateTtlConfig>,
    meta: OnceLock<StateMeta>,
    _t: PhantomData<fn() -> (K, V)>,
}

impl<K, V> MapStateDescriptor<K, V> {
    /// A map state named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        MapStateDescriptor {
            name: name.into(),
            ttl: None,
            meta: OnceLock::new(),
            _t: PhantomData,
        }
    }
    common!();
}

impl<K: StateValue + Hash + Eq, V: StateValue> StateDescriptor for MapStateDescriptor<K, V> {
    type Stored = HashMap<K, V>;
    fn name(&self) -> &str {
        &self.name
    }
    fn type_description(&self) -> String {
        format!("Map<{}, {}>", tn::<K>(), tn::<V>())
    }
    fn ttl(&self) -> Option<&StateTtlConfig> {
        self.ttl.as_ref()
    }
    fn meta(&self) -> &StateMeta {
        self.meta
            .get_or_init(|| StateMeta::new(&self.name, self.type_description()))
    }
}

/// The function of a reducing state: `reduce(accumulated, new)`.
pub type ReduceFn<T> = Arc<dyn Fn(T, T) -> T + Send + Sync>;

/// Describes a [`ReducingState<T>`](super::ReducingState): one value per key,
/// combined with each added value by a reduce function.
#[derive(Clone)]
pub struct ReducingStateDescriptor<T> {
    name: String,
    ttl: Option<StateTtlConfig>,
    meta: OnceLock<StateMeta>,
    pub(crate) reduce: ReduceFn<T>,
}

impl<T> ReducingStateDescriptor<T> {
    /// A reducing state named `name` combining values with `reduce`.
    pub fn new(
        name: impl Into<String>,
        reduce: impl Fn(T, T) -> T + Send + Sync + 'static,
    ) -> Self {
        ReducingStateDescriptor {
            name: name.into(),
            ttl: None,
            meta: OnceLock::new(),
            reduce: Arc::new(reduce),
        }
    }
    common!();
}

impl<T: StateValue> StateDescriptor for ReducingStateDescriptor<T> {
    type Stored = T;
    fn name(&self) -> &str {
        &self.name
    }
    fn type_description(&self) -> String {
        format!("Reducing<{}>", tn::<T>())
    }
    fn ttl(&self) -> Option<&StateTtlConfig> {
        self.ttl.as_ref()
    }
    fn meta(&self) -> &StateMeta {
        self.meta
            .get_or_init(|| StateMeta::new(&self.name, self.type_description()))
    }
}

/// Describes an [`AggregatingState<IN, OUT>`](super::AggregatingState): an
/// accumulator `ACC` per key, fed `IN` values, read as `OUT`.
pub struct AggregatingStateDescriptor<IN, ACC, OUT> {
    name: String,
    ttl: Option<StateTtlConfig>,
    meta: OnceLock<StateMeta>,
    pub(crate) function: Arc<dyn AggregateFunction<IN, ACC, OUT>>,
}

impl<IN, ACC, OUT> Clone for AggregatingStateDescriptor<IN, ACC, OUT> {
    fn clone(&self) -> Self {
        AggregatingStateDescriptor {
            name: self.name.clone(),
            ttl: self.ttl.clone(),
            meta: self.meta.clone(),
            function: self.function.clone(),
        }
    }
}

impl<IN, ACC, OUT> AggregatingStateDescriptor<IN, ACC, OUT> {
    /// An aggregating state named `name` using `function`.
    pub fn new(name: impl Into<String>, function: impl AggregateFunction<IN, ACC, OUT>) -> Self {
        AggregatingStateDescriptor {
            name: name.into(),
            ttl: None,
            meta: OnceLock::new(),
            function: Arc::new(function),
        }
    }
    common!();
}

impl<IN, ACC: StateValue, OUT> StateDescriptor for AggregatingStateDescriptor<IN, ACC, OUT> {
    type Stored = ACC;
    fn name(&self) -> &str {
        &self.name
    }
    fn type_description(&self) -> String {
        format!(
            "Aggregating<{}, {}, {}>",
            tn::<IN>(),
            tn::<ACC>(),
            tn::<OUT>()
        )
    }
    fn ttl(&self) -> Option<&StateTtlConfig> {
        self.ttl.as_ref()
    }
    fn meta(&self) -> &StateMeta {
        self.meta
            .get_or_init(|| StateMeta::new(&self.name, self.type_description()))
    }
}
