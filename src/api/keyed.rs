//! `KeyedStream<T, K>`: a stream partitioned by key, with keyed operators.

use super::datastream::DataStream;
use crate::operators::keyed::{
    KeyFn, KeyedProcessFunction, KeyedProcessOp, Numeric, Rolling, RollingOp,
};
use crate::state::{HeapStateBackend, RedbStateBackend, StateBackendKind, StateKey, StateValue};
use crate::time::{Clock, SystemClock};
use std::hash::Hash;
use std::sync::Arc;

/// A stream partitioned by key: every record of a key reaches the same subtask.
pub struct KeyedStream<T, K> {
    pub(crate) stream: DataStream<T>,
    pub(crate) key: KeyFn<T, K>,
}

impl<T, K> Clone for KeyedStream<T, K> {
    fn clone(&self) -> Self {
        KeyedStream {
            stream: self.stream.clone(),
            key: self.key.clone(),
        }
    }
}

impl<T, K> KeyedStream<T, K>
where
    T: Clone + Send + 'static,
    K: Hash + Eq + Clone + Send + 'static,
{
    pub(crate) fn new(stream: DataStream<T>, key: KeyFn<T, K>) -> Self {
        KeyedStream { stream, key }
    }

    /// The partitioned stream, for operators that do not need the key.
    pub fn as_stream(&self) -> &DataStream<T> {
        &self.stream
    }

    fn rolling<N: Numeric>(&self, name: &str, kind: Rolling<T, N>) -> DataStream<T>
    where
        T: StateValue,
        K: Sync + StateKey,
    {
        let key = self.key.clone();
        self.stream
            .transform(name, move |_| RollingOp::new(key.clone(), kind.clone()))
            .with_serde_input::<T>()
    }

    /// Rolling reduce: emits `f(accumulator, record)` for every record.
    pub fn reduce<F>(&self, f: F) -> DataStream<T>
    where
        F: Fn(T, T) -> T + Send + Sync + 'static,
        T: StateValue,
        K: Sync + StateKey,
    {
        self.rolling::<i64>("Keyed Reduce", Rolling::Reduce(Arc::new(f)))
    }

    /// Rolling sum of a field. Emits the incoming record with the field set to
    /// the running sum (its other fields are the latest record's; Flink keeps the
    /// first record's — equal whenever they derive from the key).
    pub fn sum<N, F>(&self, field: F) -> DataStream<T>
    where
        N: Numeric,
        F: Fn(&mut T) -> &mut N + Send + Sync + 'static,
        T: StateValue,
        K: Sync + StateKey,
    {
        self.rolling("Keyed Sum", Rolling::Sum(Arc::new(field)))
    }

    /// Sum of a field per key, emitted once per key when the input ends
    /// (the key's first record with the field set to the sum, as Flink
    /// keeps it), nothing before: Flink's `sum` in BATCH execution mode. For jobs
    /// that want only the final sums, such as a bounded word count: no
    /// update per record flows downstream, and nothing but this operator's
    /// keyed state holds the sums. Checkpoints and restores are those of
    /// [`sum`](Self::sum).
    pub fn sum_at_end_of_input<N, F>(&self, field: F) -> DataStream<T>
    where
        N: Numeric,
        F: Fn(&mut T) -> &mut N + Send + Sync + 'static,
        T: StateValue,
        K: Sync + StateKey,
    {
        let key = self.key.clone();
        let kind = Rolling::Sum(Arc::new(field));
        self.stream
            .transform("Keyed Sum", move |_| {
                RollingOp::at_end_of_input(key.clone(), kind.clone())
            })
            .with_serde_input::<T>()
    }

    /// Rolling minimum of a field (other fields from the key's first record).
    pub fn min<N, F>(&self, field: F) -> DataStream<T>
    where
        N: Numeric,
        F: Fn(&mut T) -> &mut N + Send + Sync + 'static,
        T: StateValue,
        K: Sync + StateKey,
    {
        self.rolling("Keyed Min", Rolling::Min(Arc::new(field)))
    }

    /// Rolling maximum of a field (other fields from the key's first record).
    pub fn max<N, F>(&self, field: F) -> DataStream<T>
    where
        N: Numeric,
        F: Fn(&mut T) -> &mut N + Send + Sync + 'static,
        T: StateValue,
        K: Sync + StateKey,
    {
        self.rolling("Keyed Max", Rolling::Max(Arc::new(field)))
    }

    /// The record with the smallest field so far (the first among equals).
    pub fn min_by<N, F>(&self, field: F) -> DataStream<T>
    where
        N: Numeric,
        F: Fn(&mut T) -> &mut N + Send + Sync + 'static,
        T: StateValue,
        K: Sync + StateKey,
    {
        self.rolling("Keyed MinBy", Rolling::MinBy(Arc::new(field)))
    }

    /// The record with the largest field so far (the first among equals).
    pub fn max_by<N, F>(&self, field: F) -> DataStream<T>
    where
        N: Numeric,
        F: Fn(&mut T) -> &mut N + Send + Sync + 'static,
        T: StateValue,
        K: Sync + StateKey,
    {
        self.rolling("Keyed MaxBy", Rolling::MaxBy(Arc::new(field)))
    }

    /// Tumbling count windows: fire and purge every `size` records of a key.
    pub fn count_window(&self, size: u64) -> super::WindowedStream<T, K>
    where
        T: StateValue,
        K: Sync + StateKey,
    {
        use crate::window::trigger::{CountTrigger, PurgingTrigger};
        self.reject_zero(&[size], "count_window(size)");
        self.window(crate::window::WindowAssigner::global())
            .trigger(PurgingTrigger(CountTrigger(size)))
    }

    /// Records a configuration error (reported by `execute`) for zero counts.
    fn reject_zero(&self, counts: &[u64], what: &str) {
        if counts.contains(&0) {
            self.stream
                .env()
                .inner
                .borrow_mut()
                .errors
                .push(crate::Error::Config(format!(
                    "{what} needs counts of at least 1"
                )));
        }
    }

    /// Sliding count windows: every `slide` records, the last `size` records of a key.
    pub fn count_window_sliding(&self, size: u64, slide: u64) -> super::WindowedStream<T, K>
    where
        T: StateValue,
        K: Sync + StateKey,
    {
        use crate::window::trigger::{CountEvictor, CountTrigger};
        self.reject_zero(&[size, slide], "count_window_sliding(size, slide)");
        self.window(crate::window::WindowAssigner::global())
            .trigger(CountTrigger(slide))
            .evictor(CountEvictor(size as usize))
    }

    /// Groups the stream into event-time windows.
    pub fn window(&self, assigner: crate::window::WindowAssigner<T>) -> super::WindowedStream<T, K>
    where
        T: StateValue,
        K: Sync + StateKey,
    {
        super::WindowedStream::new(self.stream.clone(), self.key.clone(), assigner)
    }

    /// Runs a keyed process function; its context knows the current key and
    /// offers timers for it. Processing time is the system clock.
    pub fn process<U, P>(&self, function: P) -> DataStream<U>
    where
        U: Clone + Send + 'static,
        P: KeyedProcessFunction<K, T, U> + Clone + Sync,
        K: Sync + StateKey,
    {
        self.process_with_clock(function, SystemClock)
    }

    /// Like [`process`](Self::process), with processing time (and so
    /// processing-time timers) read from `clock`, shared by all subtasks —
    /// for example a [`ManualClock`](crate::time::ManualClock) a test drives.
    ///
    /// # Examples
    /// ```
    /// use floe::operators::process::ProcessContext;
    /// use floe::time::ManualClock;
    ///
    /// let clock = ManualClock::new(7);
    /// let env = floe::StreamExecutionEnvironment::new();
    /// let out = env
    ///     .from_collection(vec![1i64, 2])
    ///     .key_by(|x| *x)
    ///     .process_with_clock(
    ///         |x: i64, ctx: &mut ProcessContext<'_, '_, (i64, i64), i64>| {
    ///             ctx.collect((x, ctx.current_processing_time()));
    ///             Ok(())
    ///         },
    ///         clock,
    ///     )
    ///     .collect();
    /// env.execute().unwrap();
    /// let mut got = out.take();
    /// got.sort();
    /// assert_eq!(got, vec![(1, 7), (2, 7)]);
    /// ```
    pub fn process_with_clock<U, P, C>(&self, function: P, clock: C) -> DataStream<U>
    where
        U: Clone + Send + 'static,
        P: KeyedProcessFunction<K, T, U> + Clone + Sync,
        C: Clock + 'static,
        K: Sync + StateKey,
    {
        self.process_with(function, Arc::new(clock), StateBackendKind::Heap)
    }

    /// Like [`process`](Self::process), with keyed state in the backend
    /// `kind` (the default of `process` is [`StateBackendKind::Heap`]).
    ///
    /// With [`StateBackendKind::Redb`], each subtask creates its database
    /// file when the job starts; a file that cannot be created fails that
    /// subtask (a panic naming the file).
    ///
    /// # Examples
    /// ```
    /// use floe::operators::process::ProcessContext;
    /// use floe::state::{StateBackendKind, ValueStateDescriptor};
    ///
    /// let env = floe::StreamExecutionEnvironment::new();
    /// let count = ValueStateDescriptor::<u64>::new("count");
    /// let out = env
    ///     .from_collection(vec![1i64, 2, 1])
    ///     .key_by(|x| *x)
    ///     .process_with_backend(
    ///         move |x: i64, ctx: &mut ProcessContext<'_, '_, (i64, u64), i64>| {
    ///             let mut s = ctx.value_state(&count)?;
    ///             let n = s.value()?.unwrap_or(0) + 1;
    ///             s.update(n)?;
    ///             ctx.collect((x, n));
    ///             Ok(())
    ///         },
    ///         StateBackendKind::Redb { dir: None },
    ///     )
    ///     .collect();
    /// env.execute().unwrap();
    /// let mut got = out.take();
    /// got.sort();
    /// assert_eq!(got, vec![(1, 1), (1, 2), (2, 1)]);
    /// ```
    pub fn process_with_backend<U, P>(&self, function: P, kind: StateBackendKind) -> DataStream<U>
    where
        U: Clone + Send + 'static,
        P: KeyedProcessFunction<K, T, U> + Clone + Sync,
        K: Sync + StateKey,
    {
        self.process_with(function, Arc::new(SystemClock), kind)
    }

    fn process_with<U, P>(
        &self,
        function: P,
        clock: Arc<dyn Clock>,
        kind: StateBackendKind,
    ) -> DataStream<U>
    where
        U: Clone + Send + 'static,
        P: KeyedProcessFunction<K, T, U> + Clone + Sync,
        K: Sync + StateKey,
    {
        let key = self.key.clone();
        self.stream.transform("Keyed Process", move |view| {
            let operator = format!("Keyed Process[{}]", view.subtask);
            let op = KeyedProcessOp::with_clock(key.clone(), function.clone(), clock.clone());
            match &kind {
                StateBackendKind::Heap => op.with_state_backend(
                    HeapStateBackend::for_subtask(
                        operator,
                        view.max_parallelism,
                        view.subtask as u32,
                        view.parallelism as u32,
                    )
                    .with_clock(clock.clone()),
                ),
                StateBackendKind::Redb { dir } => {
                    let backend = RedbStateBackend::for_subtask(
                        operator,
                        view.max_parallelism,
                        view.subtask as u32,
                        view.parallelism as u32,
                        dir.as_deref(),
                    )
                    .unwrap_or_else(|e| panic!("{e}"))
                    .with_clock(clock.clone());
                    op.with_state_backend(backend)
                }
            }
        })
    }
}
