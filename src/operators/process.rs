//! Process functions: the most general one-input operator.
//!
//! A process function sees one record at a time with its context: the record's
//! timestamp, the current watermark, the main output and side outputs (and, on
//! a keyed stream, the current key and a timer service). Timers exist only on
//! keyed streams, as in Flink: registering one from a process function on a
//! non-keyed stream fails the job once the call returns. A keyed function's
//! timers call back into [`KeyedProcessFunction::on_timer`] with an
//! [`OnTimerContext`].
//!
//! A non-keyed process function may keep operator list state (Flink's
//! `ListCheckpointed`/`CheckpointedFunction` operator state):
//! `ctx.operator_list_state(&desc)` (even-split redistribution) and
//! `ctx.union_list_state(&desc)` (union redistribution) return lists of the
//! subtask, snapshotted with every checkpoint and redistributed on restore
//! (see [`OperatorStateStore`]). [`ProcessFunction::open`] runs once per
//! subtask before its first record, after any restore, so the function can
//! read restored state up front (Flink's `initializeState`).
//!
//! [`KeyedProcessFunction::on_timer`]: super::keyed::KeyedProcessFunction::on_timer

use super::{Operator, Output, OutputTag, RestoredState, SnapshotContext, StateCapture};
use crate::state::{
    AggregatingState, AggregatingStateDescriptor, KeyScope, ListState, ListStateDescriptor,
    MapState, MapStateDescriptor, OperatorListState, OperatorStateStore, ReducingState,
    ReducingStateDescriptor, StateBackend, StateDescriptor, StateError, StateKey, StateValue,
    ValueState, ValueStateDescriptor, for_each_entry,
};
use crate::time::{Clock, SystemClock, TimeDomain, TimerService};
use crate::{Error, Result};
use floe_actors::element::{Batch, MIN_WATERMARK, Timestamp};
use std::borrow::Cow;
use std::hash::Hash;
use std::ops::{Deref, DerefMut};

/// The error of a timer call on a non-keyed stream.
pub(crate) fn timers_need_keys() -> Error {
    Error::User("timers are only supported on keyed streams: use key_by(..).process(..)".into())
}

/// The context a process function gets with each record.
pub struct ProcessContext<'a, 'o, OUT, K = ()> {
    pub(crate) out: &'a mut Output<'o, OUT>,
    pub(crate) timestamp: Option<Timestamp>,
    pub(crate) watermark: Timestamp,
    pub(crate) key: Option<&'a K>,
    /// The keyed operator's timers; `None` on non-keyed streams.
    pub(crate) timers: Option<&'a mut TimerService<K>>,
    /// Set when a timer call was made without a timer service.
    pub(crate) timer_misuse: bool,
    /// The keyed operator's state; `None` on non-keyed streams.
    pub(crate) state: Option<&'a mut dyn StateBackend<K>>,
    /// The non-keyed operator's list states; `None` on keyed streams.
    pub(crate) operator_state: Option<&'a mut OperatorStateStore>,
}

impl<'a, 'o, OUT, K> ProcessContext<'a, 'o, OUT, K> {
    /// A context without key and timers (non-keyed streams).
    pub(crate) fn unkeyed(
        out: &'a mut Output<'o, OUT>,
        timestamp: Option<Timestamp>,
        watermark: Timestamp,
    ) -> Self {
        ProcessContext {
            out,
            timestamp,
            watermark,
            key: None,
            timers: None,
            timer_misuse: false,
            state: None,
            operator_state: None,
        }
    }
}

impl<OUT, K> ProcessContext<'_, '_, OUT, K> {
    /// The current record's timestamp.
    pub fn timestamp(&self) -> Option<Timestamp> {
        self.timestamp
    }

    /// The operator's current watermark.
    pub fn current_watermark(&self) -> Timestamp {
        self.watermark
    }

    /// The current processing time in milliseconds: the keyed operator's clock
    /// (see `KeyedStream::process_with_clock`), or the system clock on
    /// non-keyed streams.
    pub fn current_processing_time(&self) -> Timestamp {
        match &self.timers {
            Some(t) => t.current_processing_time(),
            None => SystemClock.now_ms(),
        }
    }

    /// Emits a value with the current record's timestamp.
    pub fn collect(&mut self, value: OUT) {
        self.out.collect_with_timestamp(value, self.timestamp);
    }

    /// Emits a value with an explicit timestamp.
    pub fn collect_with_timestamp(&mut self, value: OUT, timestamp: Option<Timestamp>) {
        self.out.collect_with_timestamp(value, timestamp);
    }

    /// Emits a value to a side output, with the current record's timestamp.
    pub fn output<X: 'static>(&mut self, tag: &OutputTag<X>, value: X) {
        self.out.side(tag, value, self.timestamp);
    }

    /// The key of the current record (keyed streams only).
    pub fn current_key(&self) -> Option<&K> {
        self.key
    }

    fn operator_state(&mut self, state: &str) -> Result<&mut OperatorStateStore> {
        match self.operator_state.as_deref_mut() {
            Some(store) => Ok(store),
            None => Err(StateError::NoOperatorState {
                state: state.to_string(),
            }
            .into()),
        }
    }

    /// This subtask's even-split operator list state named by `desc`
    /// (non-keyed `process` only; elsewhere a
    /// [`StateError::NoOperatorState`]). On restore at another parallelism
    /// the entries of all former subtasks are dealt out over the new ones.
    ///
    /// # Examples
    /// ```
    /// use floe::operators::process::ProcessContext;
    /// use floe::state::ListStateDescriptor;
    ///
    /// let seen = ListStateDescriptor::<i64>::new("seen");
    /// let env = floe::StreamExecutionEnvironment::new();
    /// let out = env
    ///     .from_collection(vec![3i64, 1, 2])
    ///     .process(move |x: i64, ctx: &mut ProcessContext<'_, '_, usize>| {
    ///         let mut list = ctx.operator_list_state(&seen)?;
    ///         list.add(x);
    ///         let n = list.len();
    ///         ctx.collect(n);
    ///         Ok(())
    ///     })
    ///     .set_parallelism(1)
    ///     .collect();
    /// env.execute().unwrap();
    /// let mut got = out.take();
    /// got.sort();
    /// assert_eq!(got, vec![1, 2, 3]);
    /// ```
    pub fn operator_list_state<T: StateValue>(
        &mut self,
        desc: &ListStateDescriptor<T>,
    ) -> Result<OperatorListState<'_, T>> {
        Ok(self.operator_state(desc.name())?.list_state(desc)?)
    }

    /// This subtask's union operator list state named by `desc`: on
    /// restore every subtask gets the entries of all former subtasks.
    pub fn union_list_state<T: StateValue>(
        &mut self,
        desc: &ListStateDescriptor<T>,
    ) -> Result<OperatorListState<'_, T>> {
        Ok(self.operator_state(desc.name())?.union_list_state(desc)?)
    }
}

impl<OUT, K: Hash + Eq + Clone> ProcessContext<'_, '_, OUT, K> {
    fn timer_call(&mut self, domain: TimeDomain, timestamp: Timestamp, register: bool) {
        match (self.timers.as_deref_mut(), self.key) {
            (Some(timers), Some(key)) => {
                if register {
                    timers.register(domain, key, timestamp);
                } else {
                    timers.delete(domain, key, timestamp);
                }
            }
            _ => self.timer_misuse = true,
        }
    }

    /// Registers an event-time timer for the current key: `on_timer` runs
    /// once the watermark reaches `timestamp` (at the latest with the final
    /// watermark at the end of input). Registering the same (key, timestamp)
    /// again changes nothing. Keyed streams only: on other streams the job
    /// fails.
    pub fn register_event_time_timer(&mut self, timestamp: Timestamp) {
        self.timer_call(TimeDomain::EventTime, timestamp, true);
    }

    /// Deletes the current key's event-time timer at `timestamp`, if pending.
    pub fn delete_event_time_timer(&mut self, timestamp: Timestamp) {
        self.timer_call(TimeDomain::EventTime, timestamp, false);
    }

    /// Registers a processing-time timer for the current key: `on_timer` runs
    /// at the operator's first clock check at or after `timestamp` (before and
    /// after each input batch, and on each watermark). Timers still pending at
    /// the end of input are dropped, as in Flink. Keyed streams only.
    pub fn register_processing_time_timer(&mut self, timestamp: Timestamp) {
        self.timer_call(TimeDomain::ProcessingTime, timestamp, true);
    }

    /// Deletes the current key's processing-time timer at `timestamp`, if
    /// pending.
    pub fn delete_processing_time_timer(&mut self, timestamp: Timestamp) {
        self.timer_call(TimeDomain::ProcessingTime, timestamp, false);
    }
}

/// Keyed state of the current key. Each call returns a handle that borrows
/// the context until dropped; on a non-keyed stream every call fails with
/// [`StateError::NotKeyed`].
///
/// # Examples
/// ```
/// use floe::operators::process::ProcessContext;
/// use floe::state::ValueStateDescriptor;
///
/// let count = ValueStateDescriptor::<u64>::new("count");
/// let env = floe::StreamExecutionEnvironment::new();
/// let out = env
///     .from_collection(vec!["a", "b", "a"])
///     .key_by(|w: &&str| w.to_string())
///     .process(move |w: &str, ctx: &mut ProcessContext<'_, '_, (String, u64), String>| {
///         let mut state = ctx.value_state(&count)?;
///         let n = state.value()?.unwrap_or(0) + 1;
///         state.update(n)?;
///         ctx.collect((w.to_string(), n));
///         Ok(())
///     })
///     .collect();
/// env.execute().unwrap();
/// let mut got = out.take();
/// got.sort();
/// assert_eq!(got, vec![("a".into(), 1), ("a".into(), 2), ("b".into(), 1)]);
/// ```
impl<OUT, K: StateKey> ProcessContext<'_, '_, OUT, K> {
    /// Calls `f` with every key holding a value of the state `desc` (not
    /// just the current key's), the value and the output: at end of input
    /// ([`KeyedProcessFunction::on_end_of_input`]), to emit final results
    /// from the keyed state instead of keeping them a second time
    /// elsewhere. Keys are borrowed from the heap backend, decoded (owned)
    /// from redb.
    ///
    /// [`KeyedProcessFunction::on_end_of_input`]: super::keyed::KeyedProcessFunction::on_end_of_input
    pub fn for_each_entry<D: StateDescriptor>(
        &mut self,
        desc: &D,
        mut f: impl FnMut(Cow<'_, K>, &D::Stored, &mut Output<'_, OUT>),
    ) -> Result<()> {
        let Some(backend) = self.state.as_deref_mut() else {
            return Err(StateError::NotKeyed {
                state: desc.meta().name.clone(),
            }
            .into());
        };
        let out = &mut *self.out;
        for_each_entry(backend, desc, |k, v| {
            f(k, v, out);
            Ok(())
        })?;
        Ok(())
    }

    fn key_scope(&mut self, state: &str) -> std::result::Result<KeyScope<'_, K>, StateError> {
        match (self.state.as_deref_mut(), self.key) {
            (Some(backend), Some(key)) => Ok(KeyScope::new(backend, key)),
            (Some(_), None) => Err(StateError::NoCurrentKey {
                state: state.to_string(),
            }),
            _ => Err(StateError::NotKeyed {
                state: state.to_string(),
            }),
        }
    }

    /// The current key's [`ValueState`].
    pub fn value_state<T: StateValue>(
        &mut self,
        desc: &ValueStateDescriptor<T>,
    ) -> Result<ValueState<'_, K, T>> {
        Ok(self.key_scope(desc.name())?.value_state(desc)?)
    }

    /// The current key's [`ListState`].
    pub fn list_state<T: StateValue>(
        &mut self,
        desc: &ListStateDescriptor<T>,
    ) -> Result<ListState<'_, K, T>> {
        Ok(self.key_scope(desc.name())?.list_state(desc)?)
    }

    /// The current key's [`MapState`].
    pub fn map_state<UK: StateValue + Hash + Eq, UV: StateValue>(
        &mut self,
        desc: &MapStateDescriptor<UK, UV>,
    ) -> Result<MapState<'_, K, UK, UV>> {
        Ok(self.key_scope(desc.name())?.map_state(desc)?)
    }

    /// The current key's [`ReducingState`].
    pub fn reducing_state<'s, T: StateValue>(
        &'s mut self,
        desc: &'s ReducingStateDescriptor<T>,
    ) -> Result<ReducingState<'s, K, T>> {
        Ok(self.key_scope(desc.name())?.reducing_state(desc)?)
    }

    /// The current key's [`AggregatingState`].
    pub fn aggregating_state<'s, IN: 'static, ACC: StateValue, R: 'static>(
        &'s mut self,
        desc: &'s AggregatingStateDescriptor<IN, ACC, R>,
    ) -> Result<AggregatingState<'s, K, IN, ACC, R>> {
        Ok(self.key_scope(desc.name())?.aggregating_state(desc)?)
    }
}

/// The context of a firing timer: everything a [`ProcessContext`] offers
/// (through `Deref`) — output, side outputs, watermark, processing time,
/// registering and deleting timers for the same key — plus the timer's key,
/// timestamp and [`TimeDomain`].
///
/// Values collected from an event-time timer carry the timer's timestamp;
/// those from a processing-time timer carry none (Flink's rules).
pub struct OnTimerContext<'a, 'o, OUT, K> {
    pub(crate) inner: ProcessContext<'a, 'o, OUT, K>,
    pub(crate) key: &'a K,
    pub(crate) timestamp: Timestamp,
    pub(crate) domain: TimeDomain,
}

impl<OUT, K> OnTimerContext<'_, '_, OUT, K> {
    /// The key the timer was registered for.
    pub fn current_key(&self) -> &K {
        self.key
    }

    /// The timer's timestamp.
    pub fn timestamp(&self) -> Timestamp {
        self.timestamp
    }

    /// Whether this is an event-time or a processing-time timer.
    pub fn time_domain(&self) -> TimeDomain {
        self.domain
    }
}

impl<'a, 'o, OUT, K> Deref for OnTimerContext<'a, 'o, OUT, K> {
    type Target = ProcessContext<'a, 'o, OUT, K>;

    fn deref(&self) -> &Self::Target {
        &self.inner
    }
}

impl<OUT, K> DerefMut for OnTimerContext<'_, '_, OUT, K> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.inner
    }
}

/// What [`ProcessFunction::open`] gets: the subtask's operator list states
/// (restored ones included) and its place in the operator.
pub struct OpenContext<'a> {
    pub(crate) state: &'a mut OperatorStateStore,
    pub(crate) subtask: usize,
    pub(crate) parallelism: usize,
}

impl OpenContext<'_> {
    /// The even-split operator list state named by `desc`; see
    /// [`ProcessContext::operator_list_state`].
    pub fn operator_list_state<T: StateValue>(
        &mut self,
        desc: &ListStateDescriptor<T>,
    ) -> Result<OperatorListState<'_, T>> {
        Ok(self.state.list_state(desc)?)
    }

    /// The union operator list state named by `desc`; see
    /// [`ProcessContext::union_list_state`].
    pub fn union_list_state<T: StateValue>(
        &mut self,
        desc: &ListStateDescriptor<T>,
    ) -> Result<OperatorListState<'_, T>> {
        Ok(self.state.union_list_state(desc)?)
    }

    /// This subtask's index.
    pub fn subtask_index(&self) -> usize {
        self.subtask
    }

    /// The operator's parallelism.
    pub fn parallelism(&self) -> usize {
        self.parallelism
    }
}

/// A user function over single records with a context.
pub trait ProcessFunction<IN, OUT>: Send + 'static {
    /// Called once per subtask before its first record (or its end of
    /// input), after state was restored: read restored operator state here
    /// (Flink's `initializeState`). The default does nothing.
    fn open(&mut self, _ctx: &mut OpenContext<'_>) -> Result<()> {
        Ok(())
    }

    /// Handles one record.
    fn process_element(&mut self, value: IN, ctx: &mut ProcessContext<'_, '_, OUT>) -> Result<()>;

    /// The input is complete.
    fn on_end_of_input(&mut self, _ctx: &mut ProcessContext<'_, '_, OUT>) -> Result<()> {
        Ok(())
    }
}

/// Any `FnMut(value, ctx) -> Result<()>` is a process function.
impl<IN, OUT, F> ProcessFunction<IN, OUT> for F
where
    F: for<'a, 'o> FnMut(IN, &mut ProcessContext<'a, 'o, OUT>) -> Result<()> + Send + 'static,
{
    fn process_element(&mut self, value: IN, ctx: &mut ProcessContext<'_, '_, OUT>) -> Result<()> {
        self(value, ctx)
    }
}

/// Runs a [`ProcessFunction`] and keeps its operator list state.
pub struct ProcessOp<P> {
    pub(crate) function: P,
    pub(crate) watermark: Timestamp,
    state: OperatorStateStore,
    subtask: usize,
    parallelism: usize,
    opened: bool,
}

impl<P> ProcessOp<P> {
    /// Wraps a process function (as subtask 0 of 1).
    pub fn new(function: P) -> Self {
        Self::for_subtask(function, "Process", 0, 1)
    }

    /// Wraps a process function run as subtask `subtask` of `parallelism`;
    /// `operator` names its state in errors.
    pub fn for_subtask(
        function: P,
        operator: impl Into<String>,
        subtask: usize,
        parallelism: usize,
    ) -> Self {
        ProcessOp {
            function,
            watermark: MIN_WATERMARK,
            state: OperatorStateStore::new(operator),
            subtask,
            parallelism,
            opened: false,
        }
    }

    fn open<IN, OUT>(&mut self) -> Result<()>
    where
        P: ProcessFunction<IN, OUT>,
    {
        self.opened = true;
        let mut ctx = OpenContext {
            state: &mut self.state,
            subtask: self.subtask,
            parallelism: self.parallelism,
        };
        self.function.open(&mut ctx)
    }
}

impl<IN, OUT, P> Operator<IN, OUT> for ProcessOp<P>
where
    P: ProcessFunction<IN, OUT>,
{
    fn process_batch(&mut self, batch: Batch<IN>, out: &mut Output<'_, OUT>) -> Result<()> {
        if !self.opened {
            self.open()?;
        }
        for r in batch {
            let mut ctx = ProcessContext::unkeyed(out, r.timestamp, self.watermark);
            ctx.operator_state = Some(&mut self.state);
            self.function.process_element(r.value, &mut ctx)?;
            if ctx.timer_misuse {
                return Err(timers_need_keys());
            }
        }
        Ok(())
    }

    fn on_watermark(&mut self, watermark: Timestamp, _: &mut Output<'_, OUT>) -> Result<()> {
        self.watermark = watermark;
        Ok(())
    }

    fn on_end_of_input(&mut self, out: &mut Output<'_, OUT>) -> Result<()> {
        if !self.opened {
            self.open()?;
        }
        let mut ctx = ProcessContext::unkeyed(out, None, self.watermark);
        ctx.operator_state = Some(&mut self.state);
        self.function.on_end_of_input(&mut ctx)?;
        if ctx.timer_misuse {
            return Err(timers_need_keys());
        }
        Ok(())
    }

    fn snapshot_state(&mut self, _ctx: &SnapshotContext) -> Result<StateCapture> {
        let entries = self.state.snapshot()?;
        Ok(StateCapture {
            split_list: entries.split,
            union_list: entries.union,
            ..Default::default()
        })
    }

    fn restore_state(&mut self, state: RestoredState) -> Result<()> {
        self.state.restore(&state.split_list, &state.union_list)?;
        Ok(())
    }
}
