//! Keyed operators: rolling reduce and aggregations, keyed process functions.
//!
//! The stream arrives partitioned by key groups, so every record of a key meets
//! the same subtask. A rolling aggregation emits the updated value for every
//! record, as Flink's streaming `reduce`/`sum` do; the final value per key is
//! the last one emitted for it. Built with [`RollingOp::at_end_of_input`] it
//! emits nothing per record and each key's final value once, when the input
//! ends, as Flink's keyed `reduce`/`sum` do in BATCH execution mode: a job that
//! only wants the final values reads them from the keyed state instead of
//! keeping a second map of the updates downstream.
//!
//! A keyed process function may register timers for the current key; the
//! [`KeyedProcessOp`] keeps them in a [`TimerService`] and calls the function's
//! `on_timer` when they are due:
//! - event-time timers when the watermark reaches them (`timestamp <=
//!   watermark`), in timestamp order, before the watermark is forwarded; the
//!   final watermark (`i64::MAX`) at the end of input fires all that remain;
//! - processing-time timers when the operator's [`Clock`] has reached them.
//!   The runtime has no per-operator wake-up yet, so the operator looks at the
//!   clock before and after each input batch and on each watermark: a timer
//!   fires at the first such check at or after its time. Timers still pending
//!   at the end of input are dropped without firing, as Flink does by default.

use super::process::{OnTimerContext, ProcessContext};
use super::{Operator, Output, RestoredState, SnapshotContext, StateCapture, keyed_snapshot};
use crate::Result;
use crate::state::{HeapStateBackend, StateBackend};
use crate::state::{StateKey, StateValue};
use crate::time::{Clock, SystemClock, TimeDomain, TimerService};
use floe_actors::element::{Batch, MIN_WATERMARK, Record, Timestamp};
use floe_actors::ids::CheckpointId;
use rustc_hash::FxHashMap;
use std::hash::Hash;
use std::sync::Arc;

mod accumulators;
mod numeric;
use accumulators::Accumulators;
pub use numeric::Numeric;
use numeric::sum_overflow;

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
    state: Accumulators<T, K>,
    /// Emit each key's final accumulator at end of input instead of an
    /// update per record.
    at_end: bool,
    /// Keys moved out of `state` at end of input: the metrics go on
    /// reporting the state's final size, as a per-record aggregation's do.
    emitted: usize,
    /// Whether the first record showed that the summed (min, max) field
    /// lies outside the key, as a table keyed by field needs.
    checked: bool,
}

impl<T, K: Hash + Eq + Clone, N> RollingOp<T, K, N> {
    /// An aggregation with empty state, emitting an update per record.
    pub fn new(key: KeyFn<T, K>, kind: Rolling<T, N>) -> Self {
        RollingOp {
            state: Accumulators::new(&key, &kind),
            key,
            kind,
            at_end: false,
            emitted: 0,
            checked: false,
        }
    }

    /// An aggregation with empty state that emits nothing per record and
    /// each key's final accumulator once, at end of input (Flink's BATCH
    /// execution mode). Its state and checkpoints are those of
    /// [`new`](Self::new).
    pub fn at_end_of_input(key: KeyFn<T, K>, kind: Rolling<T, N>) -> Self {
        RollingOp {
            at_end: true,
            ..Self::new(key, kind)
        }
    }
}

impl<T, K, N> RollingOp<T, K, N>
where
    T: Clone,
    K: Hash + Eq + Clone + serde::Serialize,
    N: Numeric,
{
    /// On the first record: a `sum`, `min` or `max` whose field overlaps
    /// the key (`key_by_field(|t| &t.0)` then `sum(|t| &mut t.0)`) would
    /// change an accumulator's key as it writes the field, so its
    /// accumulators go back to a map that keeps each key apart.
    #[cold]
    fn check_field(&mut self, value: &mut T) {
        self.checked = true;
        let (KeyFn::Borrowed(g), Rolling::Sum(field) | Rolling::Min(field) | Rolling::Max(field)) =
            (&self.key, &self.kind)
        else {
            return;
        };
        if !self.state.keyed_by_field() {
            return;
        }
        let k = g(value) as *const K as usize;
        let f = field(value) as *mut N as usize;
        let overlap = k < f + std::mem::size_of::<N>() && f < k + std::mem::size_of::<K>();
        if overlap {
            let state =
                std::mem::replace(&mut self.state, Accumulators::Keyed(FxHashMap::default()));
            self.state = state.into_keyed();
        }
    }

    #[inline]
    fn update(&mut self, mut value: T) -> Result<T> {
        if !self.checked {
            self.check_field(&mut value);
        }
        let kind = &self.kind;
        // The key is looked up through the record itself: no copy unless new.
        let acc = match self.state.find_mut(&self.key, &value) {
            Some(acc) => acc,
            None => {
                self.state.insert_new(&self.key, value.clone());
                return Ok(value);
            }
        };
        match kind {
            Rolling::Reduce(f) => {
                let next = f(acc.clone(), value);
                *acc = next.clone();
                Ok(next)
            }
            Rolling::Sum(field) => {
                let add = *field(&mut value);
                let Some(sum) = (*field(acc)).checked_sum(add) else {
                    let sum = *field(acc);
                    return Err(sum_overflow(&self.key, &value, sum, add));
                };
                *field(acc) = sum;
                *field(&mut value) = sum;
                Ok(value)
            }
            Rolling::Min(field) => {
                let v = *field(&mut value);
                if v < *field(acc) {
                    *field(acc) = v;
                }
                Ok(acc.clone())
            }
            Rolling::Max(field) => {
                let v = *field(&mut value);
                if v > *field(acc) {
                    *field(acc) = v;
                }
                Ok(acc.clone())
            }
            Rolling::MinBy(field) => {
                if *field(&mut value) < *field(acc) {
                    *acc = value;
                }
                Ok(acc.clone())
            }
            Rolling::MaxBy(field) => {
                if *field(&mut value) > *field(acc) {
                    *acc = value;
                }
                Ok(acc.clone())
            }
        }
    }
}

impl<T, K, N> RollingOp<T, K, N>
where
    T: Clone,
    K: Hash + Eq + Clone + serde::Serialize,
    N: Numeric,
{
    /// Folds `value` into its key's accumulator without producing an
    /// update (for [`at_end_of_input`](Self::at_end_of_input)): a new key
    /// keeps the record itself, an existing one is combined in place.
    #[inline]
    fn accumulate(&mut self, mut value: T) -> Result<()> {
        if !self.checked {
            self.check_field(&mut value);
        }
        let acc = match self.state.find_mut(&self.key, &value) {
            Some(acc) => acc,
            None => {
                self.state.insert_new(&self.key, value);
                return Ok(());
            }
        };
        match &self.kind {
            Rolling::Reduce(f) => {
                // `f` takes the accumulator by value, as `update` gives it.
                *acc = f(acc.clone(), value);
            }
            Rolling::Sum(field) => {
                let add = *field(&mut value);
                let Some(sum) = (*field(acc)).checked_sum(add) else {
                    let sum = *field(acc);
                    return Err(sum_overflow(&self.key, &value, sum, add));
                };
                *field(acc) = sum;
            }
            Rolling::Min(field) => {
                let v = *field(&mut value);
                if v < *field(acc) {
                    *field(acc) = v;
                }
            }
            Rolling::Max(field) => {
                let v = *field(&mut value);
                if v > *field(acc) {
                    *field(acc) = v;
                }
            }
            Rolling::MinBy(field) => {
                if *field(&mut value) < *field(acc) {
                    *acc = value;
                }
            }
            Rolling::MaxBy(field) => {
                if *field(&mut value) > *field(acc) {
                    *acc = value;
                }
            }
        }
        Ok(())
    }
}

impl<T, K, N> Operator<T, T> for RollingOp<T, K, N>
where
    T: StateValue,
    K: StateKey,
    N: Numeric,
{
    #[inline]
    fn process_batch(&mut self, batch: Batch<T>, out: &mut Output<'_, T>) -> Result<()> {
        if self.at_end {
            for r in batch {
                self.accumulate(r.value)?;
            }
            return Ok(());
        }
        let mut failed = None;
        out.extend_or_reuse(batch.into_iter().map_while(|r| match self.update(r.value) {
            Ok(value) => Some(Record {
                value,
                timestamp: r.timestamp,
            }),
            Err(e) => {
                failed = Some(e);
                None
            }
        }));
        failed.map_or(Ok(()), Err)
    }

    fn on_end_of_input(&mut self, out: &mut Output<'_, T>) -> Result<()> {
        if !self.at_end {
            return Ok(());
        }
        // Taken, not copied: the values move into the output, and a
        // checkpoint after the end holds no state that a restore would
        // emit a second time (the restored input is at its end already).
        let values = self.state.take_values();
        self.emitted += values.len();
        out.extend_or_reuse(values.into_iter().map(Record::new));
        Ok(())
    }

    fn metrics_sample(&self) -> floe_actors::metrics::OperatorSample {
        let entries = self.state.len() + self.emitted;
        // A table keyed by field holds no key beside its accumulator.
        let key = if self.state.keyed_by_field() {
            0
        } else {
            std::mem::size_of::<K>()
        };
        floe_actors::metrics::OperatorSample {
            state: Some(floe_actors::metrics::StateSize {
                entries: entries as u64,
                bytes: (entries * (key + std::mem::size_of::<T>())) as u64,
            }),
            ..Default::default()
        }
    }

    fn snapshot_state(&mut self, ctx: &SnapshotContext) -> Result<StateCapture> {
        // Encoded here: one pass over the accumulators, no value cloned.
        let groups = keyed_snapshot::encode(self.state.iter(), ctx.max_parallelism)?;
        Ok(StateCapture::keyed_bytes(groups))
    }

    fn restore_state(&mut self, state: RestoredState) -> Result<()> {
        self.state.clear();
        let accumulators = &mut self.state;
        keyed_snapshot::decode::<K, T>(&state.keyed, |k, v| accumulators.restore(k, v))
    }
}

/// A process function on a keyed stream: the context knows the current key
/// and offers timers for it.
///
/// Closures `FnMut(value, ctx) -> Result<()>` are keyed process functions
/// without `on_timer`; implement the trait on a type to handle timers.
///
/// # Examples
/// ```
/// use floe::operators::keyed::KeyedProcessFunction;
/// use floe::operators::process::{OnTimerContext, ProcessContext};
/// use floe::time::WatermarkStrategy;
///
/// /// Emits `(key, count so far)` for each key once the watermark reaches 100.
/// #[derive(Clone, Default)]
/// struct CountUntil100(std::collections::HashMap<String, u64>);
///
/// impl KeyedProcessFunction<String, (String, i64), (String, u64)> for CountUntil100 {
///     fn process_element(
///         &mut self,
///         value: (String, i64),
///         ctx: &mut ProcessContext<'_, '_, (String, u64), String>,
///     ) -> floe::Result<()> {
///         *self.0.entry(value.0).or_default() += 1;
///         ctx.register_event_time_timer(100);
///         Ok(())
///     }
///
///     fn on_timer(
///         &mut self,
///         _timestamp: i64,
///         ctx: &mut OnTimerContext<'_, '_, (String, u64), String>,
///     ) -> floe::Result<()> {
///         let key = ctx.current_key().clone();
///         let n = self.0.get(&key).copied().unwrap_or(0);
///         ctx.collect((key, n));
///         Ok(())
///     }
/// }
///
/// let env = floe::StreamExecutionEnvironment::new();
/// let data = vec![("a".to_string(), 1), ("b".into(), 50), ("a".into(), 99), ("a".into(), 200)];
/// let out = env
///     .from_collection(data)
///     .assign_timestamps_and_watermarks(
///         WatermarkStrategy::monotonous_timestamps().with_timestamp_assigner(|e: &(String, i64), _| e.1).per_record(),
///     )
///     .key_by_field(|e| &e.0)
///     .process(CountUntil100::default())
///     .collect();
/// env.execute().unwrap();
/// let mut got = out.take();
/// got.sort();
/// // The watermark 199 follows the record at 200, so that record is counted
/// // when it fires both timers.
/// assert_eq!(got, vec![("a".to_string(), 3), ("b".to_string(), 1)]);
/// ```
pub trait KeyedProcessFunction<K, IN, OUT>: Send + 'static {
    /// Handles one record.
    fn process_element(
        &mut self,
        value: IN,
        ctx: &mut ProcessContext<'_, '_, OUT, K>,
    ) -> Result<()>;

    /// A timer of the current key fired; `timestamp` is the timer's time.
    /// The default does nothing.
    fn on_timer(
        &mut self,
        _timestamp: Timestamp,
        _ctx: &mut OnTimerContext<'_, '_, OUT, K>,
    ) -> Result<()> {
        Ok(())
    }

    /// The input is complete, after the final watermark fired every
    /// event-time timer: emit final results from the keyed state with
    /// [`ProcessContext::for_each_entry`] (there is no current key). The
    /// default does nothing.
    fn on_end_of_input(&mut self, _ctx: &mut ProcessContext<'_, '_, OUT, K>) -> Result<()> {
        Ok(())
    }
}

/// Any `FnMut(value, ctx) -> Result<()>` is a keyed process function (its
/// timers fire into the default, empty `on_timer`).
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

/// Runs a [`KeyedProcessFunction`] and its timers.
pub struct KeyedProcessOp<T, K, P> {
    key: KeyFn<T, K>,
    function: P,
    watermark: Timestamp,
    timers: TimerService<K>,
    state: Box<dyn StateBackend<K>>,
    /// The keyed blobs of its checkpoints (incremental snapshots).
    chain: crate::state::CheckpointChain,
}

impl<T, K: Send + 'static, P> KeyedProcessOp<T, K, P> {
    /// Wraps a keyed process function; processing time is the system clock.
    pub fn new(key: KeyFn<T, K>, function: P) -> Self {
        Self::with_clock(key, function, Arc::new(SystemClock))
    }

    /// Wraps a keyed process function whose processing time is `clock`.
    /// Its keyed state is a single-subtask heap backend owning every key
    /// group of the default maximum parallelism; jobs replace it with
    /// [`with_state_backend`](Self::with_state_backend).
    pub fn with_clock(key: KeyFn<T, K>, function: P, clock: Arc<dyn Clock>) -> Self {
        KeyedProcessOp {
            key,
            function,
            watermark: MIN_WATERMARK,
            timers: TimerService::new(clock.clone()),
            state: Box::new(HeapStateBackend::single("Keyed Process").with_clock(clock)),
            chain: Default::default(),
        }
    }

    /// Uses `backend` for keyed state (it should own this subtask's key groups).
    pub fn with_state_backend(mut self, backend: impl StateBackend<K> + 'static) -> Self {
        self.state = Box::new(backend);
        self
    }

    /// The keyed state, for snapshots and restores.
    pub fn state_backend_mut(&mut self) -> &mut dyn StateBackend<K> {
        self.state.as_mut()
    }

    /// The function, the keyed state and the current watermark at once: for
    /// operators that wrap this one and call the function outside a key.
    pub(crate) fn parts_mut(&mut self) -> (&mut P, &mut dyn StateBackend<K>, Timestamp) {
        (&mut self.function, self.state.as_mut(), self.watermark)
    }
}

impl<T, K, P> KeyedProcessOp<T, K, P>
where
    K: Hash + Eq + Clone + Send + 'static,
{
    /// Calls `on_timer` for one fired timer.
    fn fire<OUT>(
        &mut self,
        domain: TimeDomain,
        timestamp: Timestamp,
        key: K,
        out: &mut Output<'_, OUT>,
    ) -> Result<()>
    where
        P: KeyedProcessFunction<K, T, OUT>,
    {
        let inner = ProcessContext {
            out,
            // Flink: event-time firings emit at the timer's time, processing
            // time firings without timestamp.
            timestamp: (domain == TimeDomain::EventTime).then_some(timestamp),
            watermark: self.watermark,
            key: Some(&key),
            timers: Some(&mut self.timers),
            timer_misuse: false,
            state: Some(self.state.as_mut()),
            operator_state: None,
        };
        let mut ctx = OnTimerContext {
            inner,
            key: &key,
            timestamp,
            domain,
        };
        self.function.on_timer(timestamp, &mut ctx)
    }

    /// Fires every event-time timer `<= watermark`, including those that
    /// `on_timer` registers meanwhile; returns how many fired.
    fn fire_event_time<OUT>(&mut self, out: &mut Output<'_, OUT>) -> Result<usize>
    where
        P: KeyedProcessFunction<K, T, OUT>,
    {
        let mut fired = 0;
        while let Some((ts, key)) = self.timers.pop_due(TimeDomain::EventTime, self.watermark) {
            self.fire(TimeDomain::EventTime, ts, key, out)?;
            fired += 1;
        }
        Ok(fired)
    }

    /// Reads the clock once and fires every processing-time timer at or before
    /// it; returns how many fired.
    fn fire_processing_time<OUT>(&mut self, out: &mut Output<'_, OUT>) -> Result<usize>
    where
        P: KeyedProcessFunction<K, T, OUT>,
    {
        if self.timers.len(TimeDomain::ProcessingTime) == 0 {
            return Ok(0);
        }
        let now = self.timers.current_processing_time();
        let mut fired = 0;
        while let Some((ts, key)) = self.timers.pop_due(TimeDomain::ProcessingTime, now) {
            self.fire(TimeDomain::ProcessingTime, ts, key, out)?;
            fired += 1;
        }
        Ok(fired)
    }
}

impl<T, K, OUT, P> Operator<T, OUT> for KeyedProcessOp<T, K, P>
where
    T: Send + 'static,
    K: StateKey,
    P: KeyedProcessFunction<K, T, OUT>,
{
    fn metrics_sample(&self) -> floe_actors::metrics::OperatorSample {
        floe_actors::metrics::OperatorSample {
            state: Some(self.state.state_size()),
            ..Default::default()
        }
    }

    fn snapshot_state(&mut self, ctx: &SnapshotContext) -> Result<StateCapture> {
        // Synchronous: the backend captures references; timers are encoded.
        let snapshot = self.state.snapshot_for(ctx.checkpoint, ctx.savepoint);
        // An incremental snapshot builds on the blobs of the last completed
        // checkpoint, which the backend only learns from `chain`.
        let keyed_base = match snapshot.base() {
            None => Vec::new(),
            Some(b) => self.chain.base_blobs(CheckpointId(b)).ok_or_else(|| {
                crate::Error::Internal(format!("keyed state of base checkpoint {b} unknown"))
            })?,
        };
        let chain = self.chain.clone();
        let checkpoint = ctx.checkpoint;
        let keyed_persisted: Option<floe_actors::snapshot::PersistedHook> =
            (!ctx.savepoint).then(|| {
                Box::new(move |blobs: &[floe_actors::snapshot::BlobRef]| {
                    chain.persisted(checkpoint, blobs)
                }) as floe_actors::snapshot::PersistedHook
            });
        let mut timers: std::collections::BTreeMap<u32, Vec<(u8, Timestamp, &K)>> =
            Default::default();
        for (domain, ts, key) in self.timers.iter() {
            let g = floe_actors::keygroup::key_group(key, ctx.max_parallelism);
            let d = match domain {
                TimeDomain::EventTime => 0u8,
                TimeDomain::ProcessingTime => 1u8,
            };
            timers.entry(g).or_default().push((d, ts, key));
        }
        let timers: Vec<(u32, Vec<u8>)> = timers
            .into_iter()
            .map(|(g, t)| Ok((g, keyed_snapshot::to_bytes(&t)?)))
            .collect::<Result<_>>()?;
        Ok(StateCapture {
            keyed: Some(Box::new(move || {
                let state = snapshot.serialize()?;
                Ok(keyed_snapshot::merge(state, timers))
            })),
            keyed_base,
            keyed_persisted,
            ..Default::default()
        })
    }

    fn restore_watermark(&mut self, watermark: Timestamp) -> Result<()> {
        self.watermark = self.watermark.max(watermark);
        Ok(())
    }

    fn restore_state(&mut self, state: RestoredState) -> Result<()> {
        let (groups, _) = keyed_snapshot::split(&state.keyed)?;
        self.state.restore(&groups)?;
        self.chain.reset();
        self.timers.clear(TimeDomain::EventTime);
        self.timers.clear(TimeDomain::ProcessingTime);
        // A key group may come several times (a base, then deltas): every
        // entry holds all its timers, so the last one counts.
        let mut timers: std::collections::BTreeMap<u32, Vec<u8>> = Default::default();
        for g in &state.keyed {
            let (_, t): (Vec<u8>, Vec<u8>) = keyed_snapshot::from_bytes(&g.bytes)?;
            timers.insert(g.key_group, t);
        }
        for (_, bytes) in timers {
            if bytes.is_empty() {
                continue;
            }
            let list: Vec<(u8, Timestamp, K)> = keyed_snapshot::from_bytes(&bytes)?;
            for (d, ts, key) in list {
                let domain = if d == 0 {
                    TimeDomain::EventTime
                } else {
                    TimeDomain::ProcessingTime
                };
                self.timers.register(domain, &key, ts);
            }
        }
        Ok(())
    }

    fn process_batch(&mut self, batch: Batch<T>, out: &mut Output<'_, OUT>) -> Result<()> {
        self.fire_processing_time(out)?;
        for r in batch {
            let key = self.key.with_key(&r.value, K::clone);
            let mut ctx = ProcessContext {
                out,
                timestamp: r.timestamp,
                watermark: self.watermark,
                key: Some(&key),
                timers: Some(&mut self.timers),
                timer_misuse: false,
                state: Some(self.state.as_mut()),
                operator_state: None,
            };
            self.function.process_element(r.value, &mut ctx)?;
        }
        self.fire_processing_time(out)?;
        Ok(())
    }

    fn on_processing_time(&mut self, _now_ms: Timestamp, out: &mut Output<'_, OUT>) -> Result<()> {
        // The operator's own clock decides which timers are due.
        self.fire_processing_time(out).map(|_| ())
    }

    fn on_watermark(&mut self, watermark: Timestamp, out: &mut Output<'_, OUT>) -> Result<()> {
        self.watermark = self.watermark.max(watermark);
        // Event time first (the watermark is what arrived), then the clock;
        // repeat while processing-time callbacks register due event-time timers.
        loop {
            self.fire_event_time(out)?;
            if self.fire_processing_time(out)? == 0 {
                break;
            }
            let due = self
                .timers
                .next_timestamp(TimeDomain::EventTime)
                .is_some_and(|t| t <= self.watermark);
            if !due {
                break;
            }
        }
        Ok(())
    }

    fn on_end_of_input(&mut self, out: &mut Output<'_, OUT>) -> Result<()> {
        let mut ctx = ProcessContext {
            out,
            timestamp: None,
            watermark: self.watermark,
            key: None,
            timers: Some(&mut self.timers),
            timer_misuse: false,
            state: Some(self.state.as_mut()),
            operator_state: None,
        };
        self.function.on_end_of_input(&mut ctx)?;
        // The final watermark has fired every event-time timer. Pending
        // processing-time timers are dropped, as in Flink.
        let dropped = self.timers.clear(TimeDomain::ProcessingTime);
        if dropped > 0 {
            tracing::debug!(dropped, "processing-time timers pending at end of input");
        }
        Ok(())
    }

    fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<()> {
        if self.chain.complete(checkpoint) {
            self.state.notify_checkpoint_complete(checkpoint);
        }
        Ok(())
    }

    fn notify_checkpoint_aborted(&mut self, checkpoint: CheckpointId) -> Result<()> {
        self.chain.abort(checkpoint);
        Ok(())
    }
}
