//! `WindowedStream<T, K>`: a keyed stream grouped into event-time windows.

use super::datastream::DataStream;
use crate::operators::OutputTag;
use crate::operators::keyed::KeyFn;
use crate::state::window::{RedbPanes, RedbWindows};
use crate::state::{RedbStateBackend, StateBackendKind};
use crate::window::assigner::{TimeWindow, WindowAssigner};
use crate::window::function::{AggregateFunction, CollectAll, ReduceAggregate, WindowFunction};
use crate::window::operator::{WindowOp, WindowSpec};
use crate::window::sliced::SlicedWindowOp;
use crate::window::trigger::{
    EventTimeTrigger, Evictor, NeverTrigger, ProcessingTimeTrigger, Trigger,
};
use crate::window::triggered::{ClockFn, TriggeredWindowOp, system_clock};
use std::sync::Arc;

/// A keyed stream with a window assigner, waiting for its window function.
pub struct WindowedStream<T, K> {
    stream: DataStream<T>,
    key: KeyFn<T, K>,
    spec: WindowSpec<T>,
    trigger: Option<Arc<dyn Trigger<T>>>,
    evictor: Option<Arc<dyn Evictor<T>>>,
    clock: ClockFn,
    max_windows_per_record: u64,
    backend: StateBackendKind,
}

impl<T, K> Clone for WindowedStream<T, K> {
    fn clone(&self) -> Self {
        WindowedStream {
            stream: self.stream.clone(),
            key: self.key.clone(),
            spec: self.spec.clone(),
            trigger: self.trigger.clone(),
            evictor: self.evictor.clone(),
            clock: self.clock.clone(),
            max_windows_per_record: self.max_windows_per_record,
            backend: self.backend.clone(),
        }
    }
}

impl<T, K> WindowedStream<T, K>
where
    T: crate::state::StateValue,
    K: crate::state::StateKey,
{
    pub(crate) fn new(
        stream: DataStream<T>,
        key: KeyFn<T, K>,
        assigner: WindowAssigner<T>,
    ) -> Self {
        WindowedStream {
            stream,
            key,
            spec: WindowSpec {
                assigner,
                allowed_lateness: 0,
                late_tag: None,
                panes: true,
            },
            trigger: None,
            evictor: None,
            clock: system_clock(),
            max_windows_per_record: crate::window::assigner::DEFAULT_MAX_WINDOWS_PER_RECORD,
            backend: StateBackendKind::Heap,
        }
    }

    /// Keeps the windows in the state backend `kind` (default
    /// [`StateBackendKind::Heap`]: in memory). With
    /// [`StateBackendKind::Redb`], each subtask keeps its windows (the
    /// panes of tumbling and sliding windows, the sessions of session
    /// windows) in a redb database file, so they may outgrow memory, and
    /// checkpoints them as the backend does (incrementally). Custom
    /// triggers, evictors, global and processing-time windows keep theirs
    /// in memory: with them, `Redb` fails `execute`.
    ///
    /// # Examples
    /// ```
    /// use floe::state::StateBackendKind;
    /// use floe::time::WatermarkStrategy;
    /// use floe::window::{Sum, WindowAssigner};
    ///
    /// let env = floe::StreamExecutionEnvironment::new();
    /// let out = env
    ///     .from_collection(vec![1i64, 2, 3, 12])
    ///     .assign_timestamps_and_watermarks(
    ///         WatermarkStrategy::monotonous_timestamps().with_timestamp_assigner(|x: &i64, _| *x),
    ///     )
    ///     .key_by(|x| x % 2)
    ///     .window(WindowAssigner::tumbling(10))
    ///     .state_backend(StateBackendKind::Redb { dir: None })
    ///     .aggregate(Sum::of(|x: &i64| *x))
    ///     .collect();
    /// env.execute().unwrap();
    /// let mut got = out.take();
    /// got.sort();
    /// // Key 0: [0, 10) holds 2, [10, 20) holds 12; key 1: [0, 10) holds 1 + 3.
    /// assert_eq!(got, vec![2, 4, 12]);
    /// ```
    pub fn state_backend(mut self, kind: StateBackendKind) -> Self {
        self.backend = kind;
        self
    }

    /// The most windows a record may belong to (default
    /// [`DEFAULT_MAX_WINDOWS_PER_RECORD`](crate::window::assigner::DEFAULT_MAX_WINDOWS_PER_RECORD),
    /// 1000). Sliding windows put each record in up to `ceil(size / slide)`
    /// windows, each updated per record; an assigner above the limit fails
    /// `execute` with [`Error::TooManyWindows`](crate::Error::TooManyWindows)
    /// before anything runs.
    pub fn max_windows_per_record(mut self, limit: u64) -> Self {
        self.max_windows_per_record = limit;
        self
    }

    /// Replaces the default trigger (event time for time windows, never for
    /// global windows).
    pub fn trigger(mut self, trigger: impl Trigger<T>) -> Self {
        self.trigger = Some(Arc::new(trigger));
        self
    }

    /// Removes records from each window before the window function runs.
    pub fn evictor(mut self, evictor: impl Evictor<T>) -> Self {
        self.evictor = Some(Arc::new(evictor));
        self
    }

    /// The processing-time clock of triggers and processing-time windows
    /// (tests drive a `ManualClock`).
    pub fn with_clock(mut self, clock: impl crate::time::Clock + 'static) -> Self {
        self.clock = Arc::new(move || clock.now_ms());
        self
    }

    /// Keeps window state `ms` after the window's end, refiring on late records.
    pub fn allowed_lateness(mut self, ms: i64) -> Self {
        self.spec.allowed_lateness = ms.max(0);
        self
    }

    /// Sends late records to the side output `tag` of the resulting stream.
    pub fn side_output_late_data(mut self, tag: &OutputTag<T>) -> Self {
        self.spec.late_tag = Some(tag.clone());
        self
    }

    /// Incremental aggregation plus a function of key, window and result.
    pub fn aggregate_with<ACC, R, OUT, A, F>(&self, agg: A, window_fn: F) -> DataStream<OUT>
    where
        ACC: crate::state::StateValue,
        R: 'static,
        OUT: Clone + Send + 'static,
        A: AggregateFunction<T, ACC, R>,
        F: Fn(&K, &TimeWindow, R, &mut Vec<OUT>) + Send + Sync + 'static,
    {
        let (key, spec) = (self.key.clone(), self.spec.clone());
        let agg = Arc::new(agg);
        // The sliced operator calls the function by its own type (directly,
        // once per key and window); the others through `dyn`.
        let typed: Arc<F> = Arc::new(window_fn);
        let wf: WindowFunction<K, R, OUT> = typed.clone();
        let valid = spec.assigner.validate().and_then(|()| {
            spec.assigner
                .check_windows_per_record(self.max_windows_per_record)
        });
        let valid = match valid {
            Ok(()) => true,
            Err(e) => {
                // Reported by `execute`, before anything runs.
                self.stream.env().inner.borrow_mut().errors.push(e);
                false
            }
        };
        let late = spec.late_tag.clone();
        let global = matches!(spec.assigner, WindowAssigner::Global);
        let processing = spec.assigner.is_processing_time();
        let custom = self.trigger.is_some() || self.evictor.is_some() || global || processing;
        if custom && spec.assigner.is_merging() {
            self.stream
                .env()
                .inner
                .borrow_mut()
                .errors
                .push(crate::Error::Config(
                    "custom triggers and evictors are not supported on session windows yet".into(),
                ));
        }
        let redb = match &self.backend {
            StateBackendKind::Heap => None,
            StateBackendKind::Redb { dir } => Some(dir.clone()),
        };
        if custom && redb.is_some() {
            self.stream
                .env()
                .inner
                .borrow_mut()
                .errors
                .push(crate::Error::Config(
                    "custom triggers, evictors, global and processing-time windows keep their \
                     windows in memory: use the heap state backend"
                        .into(),
                ));
        }
        // Each subtask's database; a file that cannot be created fails the
        // subtask (a panic naming the file), as for a keyed process function.
        let backend = move |view: &super::datastream::NodeCtxView| {
            RedbStateBackend::<K>::for_subtask(
                format!("Window[{}]", view.subtask),
                view.max_parallelism,
                view.subtask as u32,
                view.parallelism as u32,
                redb.as_ref().and_then(|d| d.as_deref()),
            )
            .unwrap_or_else(|e| panic!("{e}"))
        };
        let redb = matches!(self.backend, StateBackendKind::Redb { .. });
        // Cumulative windows share their start, not panes of one length:
        // the general operator keeps them.
        let cumulative = matches!(spec.assigner, WindowAssigner::Cumulative { .. });
        let sliced = !custom && spec.panes && !spec.assigner.is_merging() && valid && !cumulative;
        let out = if custom {
            let trigger: Arc<dyn Trigger<T>> = match &self.trigger {
                Some(t) => t.clone(),
                None if global => Arc::new(NeverTrigger),
                None if processing => Arc::new(ProcessingTimeTrigger),
                None => Arc::new(EventTimeTrigger),
            };
            let (evictor, clock) = (self.evictor.clone(), self.clock.clone());
            self.stream.transform("Window", move |_| {
                TriggeredWindowOp::new(
                    key.clone(),
                    spec.clone(),
                    trigger.clone(),
                    evictor.clone(),
                    clock.clone(),
                    agg.clone(),
                    wf.clone(),
                )
            })
        } else if sliced && redb {
            self.stream.transform("Window", move |view| {
                let store = RedbPanes::new(backend(view));
                SlicedWindowOp::with_store(
                    key.clone(),
                    spec.clone(),
                    agg.clone(),
                    typed.clone(),
                    store,
                )
                .expect("aligned assigner checked above")
            })
        } else if sliced {
            self.stream.transform("Window", move |_| {
                SlicedWindowOp::new(key.clone(), spec.clone(), agg.clone(), typed.clone())
                    .expect("aligned assigner checked above")
            })
        } else if redb {
            self.stream.transform("Window", move |view| {
                let store = RedbWindows::new(backend(view));
                WindowOp::with_store(key.clone(), spec.clone(), agg.clone(), wf.clone(), store)
            })
        } else {
            self.stream.transform("Window", move |_| {
                WindowOp::new(key.clone(), spec.clone(), agg.clone(), wf.clone())
            })
        };
        let out = out.with_serde_input::<T>();
        if let Some(tag) = late {
            // Register the side output's type on the window operator.
            let _ = out.get_side_output(&tag);
        }
        out
    }

    /// Incremental aggregation; emits the aggregate's result per firing.
    pub fn aggregate<ACC, R, A>(&self, agg: A) -> DataStream<R>
    where
        ACC: crate::state::StateValue,
        R: Clone + Send + 'static,
        A: AggregateFunction<T, ACC, R>,
    {
        self.aggregate_with(agg, |_, _, r, out| out.push(r))
    }

    /// Incremental reduce; emits the reduced record per firing.
    pub fn reduce<F>(&self, f: F) -> DataStream<T>
    where
        F: Fn(T, T) -> T + Send + Sync + 'static,
    {
        self.aggregate(ReduceAggregate::new(f))
    }

    /// Whole-window processing: all records of the window with its key and bounds.
    pub fn process<OUT, F>(&self, f: F) -> DataStream<OUT>
    where
        OUT: Clone + Send + 'static,
        F: Fn(&K, &TimeWindow, Vec<T>, &mut Vec<OUT>) + Send + Sync + 'static,
    {
        let mut whole = self.clone();
        whole.spec.panes = false;
        whole.aggregate_with(CollectAll, f)
    }
}
