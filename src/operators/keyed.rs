//! Keyed operators: rolling reduce and aggregations, keyed process functions.
//!
//! The stream arrives partitioned by key groups, so every record of a key meets
//! the same subtask. A rolling aggregation emits the updated value for every
//! record, as Flink's streaming `reduce`/`sum` do; the final value per key is
//! the last one emitted for it.

use super::process::ProcessContext;
use super::{Operator, Output};
use crate::Result;
use floe_actors::element::{Batch, MIN_WATERMARK, Record, Timestamp};
use rustc_hash::FxHashMap;
use std::hash::Hash;
use std::sync::Arc;

/// Extracts a record's key, by value or by reference.
pub enum KeyFn<T, K> {
    /// A computed key.
    Owned(Arc<dyn Fn(&T) -> K + Send + Sync>),
    /// A key that is a field of the record: no copy per record.
    Borrowed(for<'a> fn(&'a T) -> &'a K),
}

impl<T, K> Clone for KeyFn<T, K> {
    fn clone(&self) -> Self {
        match self {
            KeyFn::Owned(f) => KeyFn::Owned(f.clone()),
            KeyFn::Borrowed(f) => KeyFn::Borrowed(*f),
        }
    }
}

impl<T, K> KeyFn<T, K> {
    /// Calls `f` with the key of `value`.
    #[inline]
    pub fn with_key<R>(&self, value: &T, f: impl FnOnce(&K) -> R) -> R {
        match self {
            KeyFn::Owned(g) => f(&g(value)),
            KeyFn::Borrowed(g) => f(g(value)),
        }
    }
}

/// Something that can be summed and compared: the field type of aggregations.
pub trait Numeric:
    Copy + PartialOrd + std::ops::Add<Output = Self> + Send + Sync + 'static
{
}
impl<N> Numeric for N where N: Copy + PartialOrd + std::ops::Add<Output = N> + Send + Sync + 'static {}

/// A field accessor used by `sum`, `min`, `max`, `min_by`, `max_by`.
pub type Field<T, N> = Arc<dyn Fn(&mut T) -> &mut N + Send + Sync>;

/// How a rolling aggregation combines the accumulator with a new record.
pub enum Rolling<T, N> {
    /// `reduce(acc, value)`; emits the new accumulator.
    Reduce(Arc<dyn Fn(T, T) -> T + Send + Sync>),
    /// Sums a field; emits the incoming record with the field set to the sum.
    Sum(Field<T, N>),
    /// Minimum of a field; emits the first record with the field set to the minimum.
    Min(Field<T, N>),
    /// Maximum of a field; emits the first record with the field set to the maximum.
    Max(Field<T, N>),
    /// The record with the smallest field (the first among equals).
    MinBy(Field<T, N>),
    /// The record with the largest field (the first among equals).
    MaxBy(Field<T, N>),
}

impl<T, N> Clone for Rolling<T, N> {
    fn clone(&self) -> Self {
        match self {
            Rolling::Reduce(f) => Rolling::Reduce(f.clone()),
            Rolling::Sum(f) => Rolling::Sum(f.clone()),
            Rolling::Min(f) => Rolling::Min(f.clone()),
            Rolling::Max(f) => Rolling::Max(f.clone()),
            Rolling::MinBy(f) => Rolling::MinBy(f.clone()),
            Rolling::MaxBy(f) => Rolling::MaxBy(f.clone()),
        }
    }
}

/// A keyed rolling aggregation; state is one accumulator per key.
pub struct RollingOp<T, K, N> {
    key: KeyFn<T, K>,
    kind: Rolling<T, N>,
    state: FxHashMap<K, T>,
}

impl<T, K, N> RollingOp<T, K, N> {
    /// An aggregation with empty state.
    pub fn new(key: KeyFn<T, K>, kind: Rolling<T, N>) -> Self {
        RollingOp {
            key,
            kind,
            state: FxHashMap::default(),
        }
    }
}

impl<T, K, N> RollingOp<T, K, N>
where
    T: Clone,
    K: Hash + Eq + Clone,
    N: Numeric,
{
    #[inline]
    fn update(&mut self, mut value: T) -> T {
        let state = &mut self.state;
        let kind = &self.kind;
        // The key is looked up through the record itself: no copy unless new.
        let acc = match &self.key {
            KeyFn::Owned(g) => {
                let k = g(&value);
                match state.get_mut(&k) {
                    Some(acc) => acc,
                    None => {
                        state.insert(k, value.clone());
                        return value;
                    }
                }
            }
            KeyFn::Borrowed(g) => match state.get_mut(g(&value)) {
                Some(acc) => acc,
                None => {
                    state.insert(g(&value).clone(), value.clone());
                    return value;
                }
            },
        };
        match kind {
            Rolling::Reduce(f) => {
                let next = f(acc.clone(), value);
                *acc = next.clone();
                next
            }
            Rolling::Sum(field) => {
                let add = *field(&mut value);
                let sum = *field(acc) + add;
                *field(acc) = sum;
                *field(&mut value) = sum;
                value
            }
            Rolling::Min(field) => {
                let v = *field(&mut value);
                if v < *field(acc) {
                    *field(acc) = v;
                }
                acc.clone()
            }
            Rolling::Max(field) => {
                let v = *field(&mut value);
                if v > *field(acc) {
                    *field(acc) = v;
                }
                acc.clone()
            }
            Rolling::MinBy(field) => {
                if *field(&mut value) < *field(acc) {
                    *acc = value;
                }
                acc.clone()
            }
            Rolling::MaxBy(field) => {
                if *field(&mut value) > *field(acc) {
                    *acc = value;
                }
                acc.clone()
            }
        }
    }
}

impl<T, K, N> Operator<T, T> for RollingOp<T, K, N>
where
    T: Clone + Send + 'static,
    K: Hash + Eq + Clone + Send + 'static,
    N: Numeric,
{
    #[inline]
    fn process_batch(&mut self, batch: Batch<T>, out: &mut Output<'_, T>) -> Result<()> {
        out.extend_or_reuse(batch.into_iter().map(|r| Record {
            value: self.update(r.value),
            timestamp: r.timestamp,
        }));
        Ok(())
    }
}

/// A process function on a keyed stream: the context knows the current key.
pub trait KeyedProcessFunction<K, IN, OUT>: Send + 'static {
    /// Handles one record.
    fn process_element(
        &mut self,
        value: IN,
        ctx: &mut ProcessContext<'_, '_, OUT, K>,
    ) -> Result<()>;
}

/// Any `FnMut(value, ctx) -> Result<()>` is a keyed process function.
impl<K, IN, OUT, F> KeyedProcessFunction<K, IN, OUT> for F
where
    F: for<'a, 'o> FnMut(IN, &mut ProcessContext<'a, 'o, OUT, K>) -> Result<()> + Send + 'static,
{
    fn process_element(
        &mut self,
        value: IN,
        ctx: &mut ProcessContext<'_, '_, OUT, K>,
    ) -> Result<()> {
        self(value, ctx)
    }
}

/// Runs a [`KeyedProcessFunction`].
pub struct KeyedProcessOp<T, K, P> {
    key: KeyFn<T, K>,
    function: P,
    watermark: Timestamp,
}

impl<T, K, P> KeyedProcessOp<T, K, P> {
    /// Wraps a keyed process function.
    pub fn new(key: KeyFn<T, K>, function: P) -> Self {
        KeyedProcessOp {
            key,
            function,
            watermark: MIN_WATERMARK,
        }
    }
}

impl<T, K, OUT, P> Operator<T, OUT> for KeyedProcessOp<T, K, P>
where
    T: Send + 'static,
    K: Clone + Send + 'static,
    P: KeyedProcessFunction<K, T, OUT>,
{
    fn process_batch(&mut self, batch: Batch<T>, out: &mut Output<'_, OUT>) -> Result<()> {
        for r in batch {
            let key = self.key.with_key(&r.value, K::clone);
            let mut ctx = ProcessContext {
                out,
                timestamp: r.timestamp,
                watermark: self.watermark,
                key: Some(&key),
            };
            self.function.process_element(r.value, &mut ctx)?;
        }
        Ok(())
    }

    fn on_watermark(&mut self, watermark: Timestamp, _: &mut Output<'_, OUT>) -> Result<()> {
        self.watermark = watermark;
        Ok(())
    }
}
