//! Aligned windows (tumbling and sliding) computed from shared slices.
//!
//! Time is cut into panes of `gcd(size, slide)`; each pane holds one hash map
//! from key to accumulator. A record updates exactly one pane, whatever the
//! number of windows it belongs to, and a window's result for a key merges the
//! key's accumulators of the panes inside the window. Windows fire in order of
//! their end as the watermark passes `end - 1`; a pane is dropped once the last
//! window containing it is past `max_timestamp + allowed_lateness`.
//!
//! The results equal per-window state: a pane lies inside exactly the windows
//! that contain its records' timestamps, and a window that was late for a
//! record has already fired for the last time, so adding the record to the
//! shared pane cannot change any later output.

use super::assigner::{TimeWindow, WindowAssigner, window_start};
use super::function::{AggregateFunction, WindowFunction};
use super::operator::WindowSpec;
use crate::operators::keyed::KeyFn;
use crate::operators::{
    Operator, Output, RestoredState, SnapshotContext, StateCapture, keyed_snapshot,
};
use crate::state::{StateKey, StateValue};
use crate::{Error, Result};
use floe_actors::element::{Batch, MIN_WATERMARK, Record, Timestamp};
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::hash::Hash;
use std::sync::Arc;

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// Keyed tumbling or sliding event-time windows over shared panes.
pub struct SlicedWindowOp<T, K, ACC, R, OUT, A> {
    key: KeyFn<T, K>,
    spec: WindowSpec<T>,
    agg: Arc<A>,
    window_fn: WindowFunction<K, R, OUT>,
    size: i64,
    slide: i64,
    offset: i64,
    pane: i64,
    watermark: Timestamp,
    /// Panes sorted by start.
    panes: VecDeque<(Timestamp, FxHashMap<K, ACC>)>,
    /// End of the next window to fire.
    next_end: Option<Timestamp>,
    /// End of the last window fired by the watermark.
    fired_upto: Timestamp,
    fired: Vec<OUT>,
    windows: Vec<TimeWindow>,
    late: super::operator::LateCounts,
}

impl<T, K, ACC, R, OUT, A> SlicedWindowOp<T, K, ACC, R, OUT, A> {
    /// An operator for `spec`, whose assigner must be tumbling or sliding.
    pub fn new(
        key: KeyFn<T, K>,
        spec: WindowSpec<T>,
        agg: Arc<A>,
        window_fn: WindowFunction<K, R, OUT>,
    ) -> Result<Self> {
        let (size, slide, offset) = match spec.assigner {
            WindowAssigner::Tumbling { size, offset } => (size, size, offset),
            WindowAssigner::Sliding {
                size,
                slide,
                offset,
            } => (size, slide, offset),
            WindowAssigner::Session { .. }
            | WindowAssigner::Global
            | WindowAssigner::ProcessingTime(_) => {
                return Err(Error::Config(
                    "only tumbling and sliding windows can be sliced".to_string(),
                ));
            }
        };
        Ok(SlicedWindowOp {
            key,
            spec,
            agg,
            window_fn,
            size,
            slide,
            offset,
            pane: gcd(size, slide),
            watermark: MIN_WATERMARK,
            panes: VecDeque::new(),
            next_end: None,
            fired_upto: MIN_WATERMARK,
            fired: Vec::new(),
            windows: Vec::new(),
            late: Default::default(),
        })
    }
}

impl<T, K, ACC, R, OUT, A> SlicedWindowOp<T, K, ACC, R, OUT, A>
where
    T: Clone + 'static,
    K: Hash + Eq + Clone,
    ACC: Clone,
    A: AggregateFunction<T, ACC, R>,
    OUT: 'static,
{
    #[inline]
    fn is_late(&self, w: &TimeWindow) -> bool {
        self.spec.is_late(w, self.watermark)
    }

    /// The smallest window end above `t` (ends are aligned like starts +
    /// size); `None` past the last end inside the timestamp range.
    #[inline]
    fn end_after(&self, t: Timestamp) -> Option<Timestamp> {
        let end_offset = (self.offset + self.size).rem_euclid(self.slide);
        window_start(t, end_offset, self.slide).checked_add(self.slide)
    }

    /// The next window end to fire for a pane starting at `p`: the first
    /// window containing it, but not one that fired already.
    #[inline]
    fn first_end_for(&self, p: Timestamp) -> Option<Timestamp> {
        // A pane exists only for records whose windows all fit in range, so
        // its first window end exists.
        let first = self.end_after(p.saturating_add(self.pane - 1))?;
        if self.watermark == MIN_WATERMARK {
            Some(first)
        } else {
            // Windows ending at or before the watermark have fired already.
            Some(first.max(self.end_after(self.watermark.saturating_add(1))?))
        }
    }

    /// The end of the last window containing the pane starting at `p`.
    #[inline]
    fn last_end(&self, p: Timestamp) -> Timestamp {
        window_start(p, self.offset, self.slide).saturating_add(self.size)
    }

    fn emit(&mut self, key: &K, w: TimeWindow, acc: &ACC, out: &mut Output<'_, OUT>) -> Result<()>
    where
        K: serde::Serialize,
    {
        let r = self
            .agg
            .try_get_result(acc)
            .map_err(|e| Error::aggregate(key, w, e))?;
        (self.window_fn)(key, &w, r, &mut self.fired);
        for v in self.fired.drain(..) {
            out.emit(Record::with_timestamp(v, w.max_timestamp()));
        }
        Ok(())
    }

    /// Merges `key`'s accumulators of the panes inside `w`.
    fn merged_for(&self, key: &K, w: &TimeWindow) -> Option<ACC> {
        let mut merged: Option<ACC> = None;
        for (start, map) in &self.panes {
            if *start < w.start {
                continue;
            }
            if *start >= w.end {
                break;
            }
            if let Some(acc) = map.get(key) {
                merged = Some(match merged.take() {
                    None => acc.clone(),
                    Some(m) => self.agg.merge(m, acc.clone()),
                });
            }
        }
        merged
    }

    fn element(&mut self, value: &T, ts: Timestamp, out: &mut Output<'_, OUT>) -> Result<bool>
    where
        K: serde::Serialize,
    {
        let mut windows = std::mem::take(&mut self.windows);
        windows.clear();
        self.spec
            .assigner
            .try_assign(value, ts, |w| windows.push(w))?;
        windows.retain(|w| !self.is_late(w));
        if windows.is_empty() {
            self.windows = windows;
            return Ok(false);
        }
        let key = self.key.with_key(value, K::clone);
        let p = window_start(ts, self.offset, self.pane);
        // Panes arrive mostly in order: search from the back.
        let idx = match self.panes.iter().rposition(|(s, _)| *s <= p) {
            Some(i) if self.panes[i].0 == p => i,
            found => {
                let at = found.map_or(0, |i| i + 1);
                self.panes.insert(at, (p, FxHashMap::default()));
                if let Some(candidate) = self.first_end_for(p) {
                    self.next_end = Some(self.next_end.map_or(candidate, |e| e.min(candidate)));
                }
                at
            }
        };
        let agg = &self.agg;
        let acc = self.panes[idx]
            .1
            .entry(key.clone())
            .or_insert_with(|| agg.create_accumulator());
        agg.add(value, acc);
        for &w in &windows {
            if w.max_timestamp() <= self.watermark
                && let Some(acc) = self.merged_for(&key, &w)
            {
                // Late but allowed: fire again with the updated result.
                if let Err(e) = self.emit(&key, w, &acc, out) {
                    self.windows = windows;
                    return Err(e);
                }
            }
        }
        self.windows = windows;
        Ok(true)
    }

    fn advance(&mut self, watermark: Timestamp, out: &mut Output<'_, OUT>) -> Result<()>
    where
        K: serde::Serialize,
    {
        while let Some(end) = self.next_end {
            if end - 1 > watermark {
                break;
            }
            let w = TimeWindow::new(end.saturating_sub(self.size), end);
            let inside: Vec<usize> = (0..self.panes.len())
                .filter(|&i| w.start <= self.panes[i].0 && self.panes[i].0 < w.end)
                .collect();
            if let [only] = inside[..] {
                // One pane (tumbling windows): its accumulators are the results.
                let pane = std::mem::take(&mut self.panes[only].1);
                let emitted = pane
                    .iter()
                    .try_for_each(|(k, acc)| self.emit(k, w, acc, out));
                self.panes[only].1 = pane;
                emitted?;
            } else {
                let mut merged: FxHashMap<K, ACC> = FxHashMap::default();
                for &i in &inside {
                    for (k, acc) in &self.panes[i].1 {
                        match merged.get_mut(k) {
                            Some(m) => {
                                let prev = std::mem::replace(m, acc.clone());
                                *m = self.agg.merge(prev, acc.clone());
                            }
                            None => {
                                merged.insert(k.clone(), acc.clone());
                            }
                        }
                    }
                }
                for (k, acc) in &merged {
                    self.emit(k, w, acc, out)?;
                }
            }
            self.fired_upto = end;
            self.drop_panes(watermark);
            // No next end past the last one inside the timestamp range: the
            // panes left are only kept for their allowed lateness.
            self.next_end = match (self.panes.front(), end.checked_add(self.slide)) {
                (Some((p, _)), Some(next)) => self
                    .end_after(p.saturating_add(self.pane - 1))
                    .map(|first| next.max(first)),
                _ => None,
            };
        }
        self.drop_panes(watermark);
        if self.panes.is_empty() {
            self.next_end = None;
        }
        Ok(())
    }

    /// Drops the panes whose last window has fired and is past its lateness.
    fn drop_panes(&mut self, watermark: Timestamp) {
        while let Some((p, _)) = self.panes.front() {
            let last_end = self.last_end(*p);
            let cleanup = (last_end - 1).saturating_add(self.spec.allowed_lateness);
            if last_end <= self.fired_upto && cleanup <= watermark {
                self.panes.pop_front();
            } else {
                break;
            }
        }
    }
}

impl<T, K, ACC, R, OUT, A> SlicedWindowOp<T, K, ACC, R, OUT, A>
where
    T: Clone + 'static,
    K: Hash + Eq + Clone,
    ACC: Clone,
    A: AggregateFunction<T, ACC, R>,
    OUT: 'static,
{
    /// After a restore: what had fired by `self.watermark` and which window
    /// fires next follow from the watermark and the panes.
    fn recompute_progress(&mut self) {
        if self.watermark > MIN_WATERMARK {
            let w1 = self.watermark.saturating_add(1);
            // Past the last end in range, every window has fired.
            self.fired_upto = self
                .end_after(w1)
                .map_or(Timestamp::MAX, |e| e.saturating_sub(self.slide));
        }
        self.next_end = self.panes.front().and_then(|(p, _)| self.first_end_for(*p));
        self.drop_panes(self.watermark);
    }
}

impl<T, K, ACC, R, OUT, A> Operator<T, OUT> for SlicedWindowOp<T, K, ACC, R, OUT, A>
where
    T: Clone + Send + 'static,
    K: StateKey,
    ACC: StateValue,
    R: 'static,
    OUT: Send + 'static,
    A: AggregateFunction<T, ACC, R>,
{
    fn metrics_sample(&self) -> floe_actors::metrics::OperatorSample {
        let entries = self.panes.iter().map(|(_, m)| m.len()).sum();
        self.late.sample(
            entries,
            std::mem::size_of::<K>() + std::mem::size_of::<ACC>(),
        )
    }

    fn snapshot_state(&mut self, ctx: &SnapshotContext) -> Result<StateCapture> {
        // Per key: its accumulator in each pane.
        let mut per_key: FxHashMap<&K, Vec<(Timestamp, &ACC)>> = FxHashMap::default();
        for (start, map) in &self.panes {
            for (k, acc) in map {
                per_key.entry(k).or_default().push((*start, acc));
            }
        }
        let groups = keyed_snapshot::encode(per_key.iter(), ctx.max_parallelism)?;
        Ok(StateCapture::keyed_bytes(groups))
    }

    fn restore_state(&mut self, state: RestoredState) -> Result<()> {
        self.panes.clear();
        let panes = &mut self.panes;
        keyed_snapshot::decode::<K, Vec<(Timestamp, ACC)>>(&state.keyed, |k, list| {
            for (start, acc) in list {
                let at = panes.partition_point(|(s, _)| *s < start);
                if panes.get(at).is_none_or(|(s, _)| *s != start) {
                    panes.insert(at, (start, FxHashMap::default()));
                }
                panes[at].1.insert(k.clone(), acc);
            }
        })?;
        self.recompute_progress();
        Ok(())
    }

    fn restore_watermark(&mut self, watermark: Timestamp) -> Result<()> {
        if watermark > self.watermark {
            self.watermark = watermark;
            self.recompute_progress();
        }
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
        self.advance(watermark, out)
    }
}
