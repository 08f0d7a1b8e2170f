//! The keyed window operator (event time).
//!
//! State is one accumulator per (key, window). Each window gets a firing timer
//! at `max_timestamp` and a cleanup timer at `max_timestamp + allowed_lateness`
//! when it is created; timers live in a [`TimerQueue`] keyed by (key,
//! window), without its per-key index (each is registered once), and are
//! checked against the live windows when they fire, so windows that were merged away
//! (sessions) need no timer deletion. The windows live in a [`WindowStore`]
//! (the heap's map by default, or a redb state backend's); the timers follow
//! from them and the watermark, so they stay in memory and are rebuilt on
//! restore.

use super::assigner::{TimeWindow, WindowAssigner};
use super::function::{AggregateFunction, WindowFunction};
use crate::operators::keyed::KeyFn;
use crate::operators::{Operator, Output, OutputTag, StateCapture};
use crate::state::window::{HeapWindows, WindowCapture, WindowStore};
use crate::time::timers::TimerQueue;
use crate::{Error, Result};
use floe_actors::element::{Batch, MIN_WATERMARK, Record, Timestamp};
use floe_actors::ids::CheckpointId;
use std::hash::Hash;
use std::sync::Arc;

/// Settings of a window operator.
pub struct WindowSpec<T> {
    /// Which windows a record belongs to.
    pub assigner: WindowAssigner<T>,
    /// How long (ms) after `max_timestamp` a window still accepts records.
    pub allowed_lateness: i64,
    /// Where late records go (dropped when `None`).
    pub late_tag: Option<OutputTag<T>>,
    /// Compute tumbling and sliding windows over shared panes
    /// (`sliced.rs`). Off for whole-window functions, which see records in
    /// arrival order and so keep per-window state.
    pub panes: bool,
}

impl<T> Clone for WindowSpec<T> {
    fn clone(&self) -> Self {
        WindowSpec {
            assigner: self.assigner.clone(),
            allowed_lateness: self.allowed_lateness,
            late_tag: self.late_tag.clone(),
            panes: self.panes,
        }
    }
}

impl<T> WindowSpec<T> {
    /// True when `w` no longer takes records: `max_timestamp +
    /// allowed_lateness <= watermark`.
    #[inline]
    pub(crate) fn is_late(&self, w: &TimeWindow, watermark: Timestamp) -> bool {
        w.max_timestamp().saturating_add(self.allowed_lateness) <= watermark
    }

    /// The event timestamp of a record entering an event-time window.
    pub(crate) fn event_time(timestamp: Option<Timestamp>) -> Result<Timestamp> {
        timestamp.ok_or_else(|| {
            Error::User(
                "record without timestamp reached an event-time window; \
                 call assign_timestamps_and_watermarks first"
                    .into(),
            )
        })
    }

    /// Sends a record no window accepted to the late output, when it is late
    /// (`timestamp + allowed_lateness <= watermark`) and a late output is set;
    /// counts it in `late` (dropped too, without a late output).
    pub(crate) fn route_late<OUT>(
        &self,
        value: T,
        ts: Timestamp,
        watermark: Timestamp,
        late: &mut LateCounts,
        out: &mut Output<'_, OUT>,
    ) where
        T: 'static,
    {
        if ts.saturating_add(self.allowed_lateness) <= watermark {
            late.late += 1;
            match &self.late_tag {
                Some(tag) => out.side(tag, value, Some(ts)),
                None => late.dropped += 1,
            }
        }
    }
}

/// Late records a window operator subtask saw, for its metrics.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LateCounts {
    /// Records that arrived after all their windows closed.
    pub late: u64,
    /// Of those, the ones dropped (no late output).
    pub dropped: u64,
}

impl LateCounts {
    /// The metrics sample of a window operator with `entries` (key, window)
    /// or (key, pane) entries of about `entry_bytes` each.
    pub(crate) fn sample(
        &self,
        entries: usize,
        entry_bytes: usize,
    ) -> floe_actors::metrics::OperatorSample {
        floe_actors::metrics::OperatorSample {
            state: Some(floe_actors::metrics::StateSize {
                entries: entries as u64,
                bytes: (entries * entry_bytes) as u64,
            }),
            late_records: self.late,
            late_records_dropped: self.dropped,
        }
    }
}

/// A window store's capture as the operator's keyed state.
pub(crate) fn state_capture(c: WindowCapture) -> StateCapture {
    let groups = c.groups;
    StateCapture {
        keyed: Some(Box::new(move || Ok(groups()?))),
        keyed_base: c.base,
        keyed_persisted: c.persisted,
        ..Default::default()
    }
}

/// Keyed event-time windows with an incremental aggregate and a window
/// function, the windows kept in the store `S`.
pub struct WindowOp<T, K, ACC, R, OUT, A, S = HeapWindows<K, TimeWindow, ACC>> {
    key: KeyFn<T, K>,
    spec: WindowSpec<T>,
    agg: Arc<A>,
    window_fn: WindowFunction<K, R, OUT>,
    watermark: Timestamp,
    state: S,
    /// The accumulator type of the store.
    _acc: std::marker::PhantomData<fn() -> ACC>,
    timers: TimerQueue<(K, TimeWindow)>,
    fired: Vec<OUT>,
    windows: Vec<TimeWindow>,
    late: LateCounts,
}

impl<T, K, ACC, R, OUT, A> WindowOp<T, K, ACC, R, OUT, A> {
    /// A window operator with empty state, in memory.
    pub fn new(
        key: KeyFn<T, K>,
        spec: WindowSpec<T>,
        agg: Arc<A>,
        window_fn: WindowFunction<K, R, OUT>,
    ) -> Self {
        Self::with_store(key, spec, agg, window_fn, HeapWindows::default())
    }
}

impl<T, K, ACC, R, OUT, A, S> WindowOp<T, K, ACC, R, OUT, A, S> {
    /// Like [`new`](WindowOp::new), with the windows in `store`.
    pub fn with_store(
        key: KeyFn<T, K>,
        spec: WindowSpec<T>,
        agg: Arc<A>,
        window_fn: WindowFunction<K, R, OUT>,
        store: S,
    ) -> Self {
        WindowOp {
            key,
            spec,
            agg,
            window_fn,
            watermark: MIN_WATERMARK,
            state: store,
            _acc: std::marker::PhantomData,
            // One firing and one cleanup timer per window, registered when
            // the window is created: nothing to deduplicate.
            timers: TimerQueue::unindexed(),
            fired: Vec::new(),
            windows: Vec::new(),
            late: LateCounts::default(),
        }
    }
}

impl<T, K, ACC, R, OUT, A, S> WindowOp<T, K, ACC, R, OUT, A, S>
where
    T: Clone + 'static,
    K: Hash + Eq + Clone,
    ACC: Clone,
    A: AggregateFunction<T, ACC, R>,
    OUT: 'static,
    S: WindowStore<K, TimeWindow, ACC>,
{
    fn is_late(&self, w: &TimeWindow) -> bool {
        self.spec.is_late(w, self.watermark)
    }

    fn register(&mut self, key: &K, w: TimeWindow) {
        let fire = w.max_timestamp();
        let cleanup = fire.saturating_add(self.spec.allowed_lateness);
        if fire > self.watermark || cleanup == fire {
            self.timers.register((key.clone(), w), fire);
        }
        if cleanup != fire {
            self.timers.register((key.clone(), w), cleanup);
        }
    }

    fn emit(&mut self, key: &K, w: TimeWindow, acc_result: R, out: &mut Output<'_, OUT>) {
        (self.window_fn)(key, &w, acc_result, &mut self.fired);
        for v in self.fired.drain(..) {
            out.emit(Record::with_timestamp(v, w.max_timestamp()));
        }
    }

    fn fire_if_present(&mut self, key: &K, w: TimeWindow, out: &mut Output<'_, OUT>) -> Result<()>
    where
        K: serde::Serialize,
    {
        let agg = &self.agg;
        let result = self
            .state
            .get(key)?
            .and_then(|ws| ws.iter().find(|(x, _)| *x == w))
            .map(|(_, acc)| agg.try_get_result(acc));
        match result {
            Some(Ok(r)) => self.emit(key, w, r, out),
            Some(Err(e)) => return Err(Error::aggregate(key, w, e)),
            None => {}
        }
        Ok(())
    }

    fn purge(&mut self, key: &K, w: TimeWindow) -> Result<()> {
        let empty = match self.state.get_mut(key)? {
            Some(ws) => {
                ws.retain(|(x, _)| *x != w);
                ws.is_empty()
            }
            None => false,
        };
        if empty {
            self.state.remove(key)?;
        }
        Ok(())
    }

    fn element(&mut self, value: &T, ts: Timestamp, out: &mut Output<'_, OUT>) -> Result<bool>
    where
        K: serde::Serialize,
    {
        let key = self.key.with_key(value, K::clone);
        if self.spec.assigner.is_merging() {
            return self.merging_element(key, value, ts, out);
        }
        let mut windows = std::mem::take(&mut self.windows);
        windows.clear();
        self.spec
            .assigner
            .try_assign(value, ts, |w| windows.push(w))?;
        let mut live = false;
        for &w in &windows {
            if self.is_late(&w) {
                continue;
            }
            live = true;
            let list = match self.state.get_or_insert(&key) {
                Ok(list) => list,
                Err(e) => {
                    self.windows = windows;
                    return Err(e.into());
                }
            };
            let created = match list.iter_mut().find(|(x, _)| *x == w) {
                Some((_, acc)) => {
                    self.agg.add(value, acc);
                    false
                }
                None => {
                    let mut acc = self.agg.create_accumulator();
                    self.agg.add(value, &mut acc);
                    list.push((w, acc));
                    true
                }
            };
            if created {
                self.register(&key, w);
            }
            if w.max_timestamp() <= self.watermark {
                // Late but allowed: fire again with the updated result.
                if let Err(e) = self.fire_if_present(&key, w, out) {
                    self.windows = windows;
                    return Err(e);
                }
            }
        }
        self.windows = windows;
        Ok(live)
    }

    fn merging_element(
        &mut self,
        key: K,
        value: &T,
        ts: Timestamp,
        out: &mut Output<'_, OUT>,
    ) -> Result<bool>
    where
        K: serde::Serialize,
    {
        let mut own = None;
        self.spec
            .assigner
            .try_assign(value, ts, |w| own = Some(w))?;
        let Some(mut merged) = own else {
            return Ok(false);
        };
        if merged.end <= merged.start {
            return Err(Error::SessionGap {
                gap: merged.end.wrapping_sub(merged.start),
            });
        }
        let list = self.state.get_or_insert(&key)?;
        let mut absorbed: Vec<(TimeWindow, ACC)> = Vec::new();
        while let Some(i) = list.iter().position(|(x, _)| x.intersects(&merged)) {
            let (w, acc) = list.swap_remove(i);
            merged = merged.cover(&w);
            absorbed.push((w, acc));
        }
        let list_empty = list.is_empty();
        if absorbed.is_empty() && self.is_late(&merged) {
            if list_empty {
                self.state.remove(&key)?;
            }
            return Ok(false);
        }
        let existed = absorbed.len() == 1 && absorbed[0].0 == merged;
        let mut acc = match absorbed.len() {
            0 => self.agg.create_accumulator(),
            _ => {
                let mut it = absorbed.into_iter().map(|(_, a)| a);
                let first = it.next().expect("one absorbed window");
                it.fold(first, |a, b| self.agg.merge(a, b))
            }
        };
        self.agg.add(value, &mut acc);
        self.state
            .get_mut(&key)?
            .expect("entry created above")
            .push((merged, acc));
        if !existed {
            self.register(&key, merged);
        }
        if merged.max_timestamp() <= self.watermark {
            self.fire_if_present(&key, merged, out)?;
        }
        Ok(true)
    }
}

impl<T, K, ACC, R, OUT, A, S> WindowOp<T, K, ACC, R, OUT, A, S>
where
    T: Clone + 'static,
    K: Hash + Eq + Clone,
    ACC: Clone,
    A: AggregateFunction<T, ACC, R>,
    OUT: 'static,
    S: WindowStore<K, TimeWindow, ACC>,
{
    /// Timers follow from the windows in state and the watermark: rebuilt
    /// after a restore.
    fn rebuild_timers(&mut self) -> Result<()> {
        self.timers.clear();
        let mut windows: Vec<(K, TimeWindow)> = Vec::new();
        self.state.for_each(&mut |k, ws| {
            windows.extend(ws.iter().map(|(w, _)| (k.clone(), *w)));
        })?;
        for (k, w) in windows {
            self.register(&k, w);
        }
        Ok(())
    }
}

impl<T, K, ACC, R, OUT, A, S> Operator<T, OUT> for WindowOp<T, K, ACC, R, OUT, A, S>
where
    T: Clone + Send + 'static,
    K: crate::state::StateKey,
    ACC: crate::state::StateValue,
    R: 'static,
    OUT: Send + 'static,
    A: AggregateFunction<T, ACC, R>,
    S: WindowStore<K, TimeWindow, ACC>,
{
    fn metrics_sample(&self) -> floe_actors::metrics::OperatorSample {
        let entries = self.state.entries();
        self.late.sample(
            entries,
            std::mem::size_of::<K>() + std::mem::size_of::<(TimeWindow, ACC)>(),
        )
    }

    fn snapshot_state(&mut self, ctx: &crate::operators::SnapshotContext) -> Result<StateCapture> {
        let capture = self
            .state
            .capture(ctx.max_parallelism, ctx.checkpoint, ctx.savepoint)?;
        Ok(state_capture(capture))
    }

    fn restore_state(&mut self, state: crate::operators::RestoredState) -> Result<()> {
        self.state.restore(&state.keyed)?;
        self.rebuild_timers()
    }

    fn restore_watermark(&mut self, watermark: Timestamp) -> Result<()> {
        if watermark > self.watermark {
            self.watermark = watermark;
            self.rebuild_timers()?;
        }
        Ok(())
    }

    fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<()> {
        self.state.checkpoint_complete(checkpoint);
        Ok(())
    }

    fn notify_checkpoint_aborted(&mut self, checkpoint: CheckpointId) -> Result<()> {
        self.state.checkpoint_aborted(checkpoint);
        Ok(())
    }

    fn process_batch(&mut self, batch: Batch<T>, out: &mut Output<'_, OUT>) -> Result<()> {
        for r in batch {
            let ts = WindowSpec::<T>::event_time(r.timestamp)?;
            if !self.element(&r.value, ts, out)? {
                self.spec
                    .route_late(r.value, ts, self.watermark, &mut self.late, out);
            }
        }
        Ok(())
    }

    fn on_watermark(&mut self, watermark: Timestamp, out: &mut Output<'_, OUT>) -> Result<()> {
        if watermark <= self.watermark {
            return Ok(());
        }
        self.watermark = watermark;
        while let Some((t, (key, w))) = self.timers.pop_due(watermark) {
            if t == w.max_timestamp() {
                self.fire_if_present(&key, w, out)?;
            }
            if t == w.max_timestamp().saturating_add(self.spec.allowed_lateness) {
                self.purge(&key, w)?;
            }
        }
        Ok(())
    }
}
