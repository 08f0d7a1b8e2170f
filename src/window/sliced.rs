//! Aligned windows (tumbling and sliding) computed from shared slices.
//!
//! Time is cut into panes of `gcd(size, slide)`; each pane holds one
//! accumulator per key. A record updates exactly one pane, whatever the
//! number of windows it belongs to, and a window's result for a key merges the
//! key's accumulators of the panes inside the window. The panes live in a
//! [`PaneStore`]: the heap's (the default, a hash map per pane) or a redb
//! state backend's (`crate::state::window`). Windows fire in order of
//! their end as the watermark passes `end - 1`; a pane is dropped once the last
//! window containing it is past `max_timestamp + allowed_lateness`.
//!
//! The results equal per-window state: a pane lies inside exactly the windows
//! that contain its records' timestamps, and a window that was late for a
//! record has already fired for the last time, so adding the record to the
//! shared pane cannot change any later output.

use super::assigner::{TimeWindow, WindowAssigner, window_start};
use super::function::{AggregateFunction, DynWindowFunction};
use super::operator::WindowSpec;
use super::operator::state_capture;
use crate::operators::keyed::KeyFn;
use crate::operators::{Operator, Output, RestoredState, SnapshotContext, StateCapture};
use crate::state::window::{HeapPanes, PaneStore};
use crate::state::{StateKey, StateValue};
use crate::{Error, Result};
use floe_actors::element::{Batch, MIN_WATERMARK, Record, Timestamp};
use floe_actors::ids::CheckpointId;
use std::hash::Hash;
use std::sync::Arc;

/// Results (a key's result for a window) a watermark or `resume` call
/// fires before it returns (rounded up to a whole window), whatever the
/// number of output records the window function makes of them.
const FIRE_CHUNK: usize = 4096;

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// Keyed tumbling or sliding event-time windows over shared panes, kept in
/// the store `S`. The window function's type `F` is known where the job is
/// built (`aggregate_with`), so the call per result is a direct one, not
/// through a `dyn` (a sliding window makes one per key and window).
pub struct SlicedWindowOp<
    T,
    K,
    ACC,
    R,
    OUT,
    A,
    S = HeapPanes<K, ACC>,
    F: ?Sized = DynWindowFunction<K, R, OUT>,
> {
    key: KeyFn<T, K>,
    spec: WindowSpec<T>,
    agg: Arc<A>,
    window_fn: Arc<F>,
    size: i64,
    slide: i64,
    offset: i64,
    pane: i64,
    watermark: Timestamp,
    /// The panes.
    panes: S,
    /// The accumulator type of the store, and the window function's
    /// result and output types.
    _types: std::marker::PhantomData<fn(R) -> (ACC, OUT)>,
    /// End of the next window to fire.
    next_end: Option<Timestamp>,
    /// End of the last window fired by the watermark.
    fired_upto: Timestamp,
    fired: Vec<OUT>,
    /// Output records of the last window fired.
    last_results: usize,
    windows: Vec<TimeWindow>,
    /// Results per watermark or `resume` call ([`FIRE_CHUNK`]).
    fire_chunk: usize,
    late: super::operator::LateCounts,
    /// Timestamps in at least one window, all of whose windows lie inside
    /// the `i64` range (`None` for windows with gaps between them): such a
    /// record past the watermark is taken by every window it belongs to,
    /// none of them late, none fired yet, without listing them.
    covered: Option<std::ops::RangeInclusive<Timestamp>>,
}

impl<T, K, ACC, R, OUT, A, F: ?Sized> SlicedWindowOp<T, K, ACC, R, OUT, A, HeapPanes<K, ACC>, F> {
    /// An operator for `spec`, whose assigner must be tumbling or sliding,
    /// with its panes in memory.
    pub fn new(
        key: KeyFn<T, K>,
        spec: WindowSpec<T>,
        agg: Arc<A>,
        window_fn: Arc<F>,
    ) -> Result<Self> {
        Self::with_store(key, spec, agg, window_fn, HeapPanes::default())
    }
}

impl<T, K, ACC, R, OUT, A, S, F: ?Sized> SlicedWindowOp<T, K, ACC, R, OUT, A, S, F> {
    /// Like [`new`](SlicedWindowOp::new), with the panes in `store`.
    pub fn with_store(
        key: KeyFn<T, K>,
        spec: WindowSpec<T>,
        agg: Arc<A>,
        window_fn: Arc<F>,
        store: S,
    ) -> Result<Self> {
        let (size, slide, offset) = match spec.assigner {
            WindowAssigner::Tumbling { size, offset } => (size, size, offset),
            WindowAssigner::Sliding {
                size,
                slide,
                offset,
            } => (size, slide, offset),
            WindowAssigner::Session { .. }
            | WindowAssigner::Cumulative { .. }
            | WindowAssigner::Global
            | WindowAssigner::ProcessingTime(_) => {
                return Err(Error::Config(
                    "only tumbling and sliding windows can be sliced".to_string(),
                ));
            }
        };
        let pane = gcd(size, slide);
        // A window containing `ts` starts after `ts - size` and ends by
        // `ts + size`.
        let covered = (size >= slide).then(|| {
            let margin = size.saturating_mul(2);
            i64::MIN.saturating_add(margin)..=i64::MAX.saturating_sub(margin)
        });
        Ok(SlicedWindowOp {
            key,
            spec,
            agg,
            window_fn,
            size,
            slide,
            offset,
            pane,
            watermark: MIN_WATERMARK,
            panes: store,
            _types: std::marker::PhantomData,
            next_end: None,
            fired_upto: MIN_WATERMARK,
            fired: Vec::new(),
            last_results: 0,
            windows: Vec::new(),
            fire_chunk: FIRE_CHUNK,
            late: Default::default(),
            covered,
        })
    }
}

impl<T, K, ACC, R, OUT, A, S, F> SlicedWindowOp<T, K, ACC, R, OUT, A, S, F>
where
    T: Clone + 'static,
    K: Hash + Eq + Clone,
    ACC: Clone,
    A: AggregateFunction<T, ACC, R>,
    OUT: 'static,
    S: PaneStore<K, ACC>,
    F: Fn(&K, &TimeWindow, R, &mut Vec<OUT>) + ?Sized,
{
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
        emit_result(
            &*self.agg,
            &*self.window_fn,
            &mut self.fired,
            key,
            w,
            acc,
            out,
        )
    }

    /// Merges `key`'s accumulators of the panes inside `w`.
    fn merged_for(&mut self, key: &K, w: &TimeWindow) -> Result<Option<ACC>> {
        let agg = &self.agg;
        Ok(self
            .panes
            .merged(key, w.start, w.end, |a, b| agg.merge(a, b))?)
    }

    fn element(&mut self, value: &T, ts: Timestamp, out: &mut Output<'_, OUT>) -> Result<bool>
    where
        K: serde::Serialize,
    {
        // Whether any window takes the record, and whether one of those
        // the watermark passed takes it late (allowed lateness): counted
        // as the assigner goes, nothing collected per record.
        let (spec, watermark) = (&self.spec, self.watermark);
        let refire = if ts > watermark && self.covered.as_ref().is_some_and(|c| c.contains(&ts)) {
            // Each of its windows ends past `ts`, so past the watermark.
            false
        } else {
            let (mut live, mut refire) = (false, false);
            spec.assigner.try_assign(value, ts, |w| {
                if !spec.is_late(&w, watermark) {
                    live = true;
                    refire |= w.max_timestamp() <= watermark;
                }
            })?;
            if !live {
                return Ok(false);
            }
            refire
        };
        let p = window_start(ts, self.offset, self.pane);
        let (agg, panes) = (&self.agg, &mut self.panes);
        // The key borrowed from the record: the store copies it only for
        // a (key, pane) it does not hold yet.
        let new_pane = self.key.with_key(value, |key| {
            panes.add(
                p,
                key,
                || agg.create_accumulator(),
                |acc| agg.add(value, acc),
            )
        })?;
        if new_pane && let Some(candidate) = self.first_end_for(p) {
            self.next_end = Some(self.next_end.map_or(candidate, |e| e.min(candidate)));
        }
        if refire {
            self.refire(value, ts, out)?;
        }
        Ok(true)
    }

    /// Fires again, with the updated results, the windows the watermark
    /// passed that took `value` late (allowed lateness): only then is the
    /// key copied and are the windows listed.
    #[cold]
    fn refire(&mut self, value: &T, ts: Timestamp, out: &mut Output<'_, OUT>) -> Result<()>
    where
        K: serde::Serialize,
    {
        let mut windows = std::mem::take(&mut self.windows);
        windows.clear();
        let (spec, watermark) = (&self.spec, self.watermark);
        let assigned = spec.assigner.try_assign(value, ts, |w| {
            if !spec.is_late(&w, watermark) && w.max_timestamp() <= watermark {
                windows.push(w);
            }
        });
        let key = self.key.with_key(value, K::clone);
        let fired = assigned.and_then(|()| {
            windows.iter().try_for_each(|&w| {
                self.merged_for(&key, &w)
                    .and_then(|acc| acc.map_or(Ok(()), |acc| self.emit(&key, w, &acc, out)))
            })
        });
        self.windows = windows;
        fired
    }

    /// Whether windows the watermark has passed are still to fire.
    #[inline]
    fn firing_pending(&self) -> bool {
        self.next_end.is_some_and(|end| end - 1 <= self.watermark)
    }

    /// Fires the windows the watermark has passed, in order of their end,
    /// stopping after the window that brings this call's results to `limit`
    /// (the rest fire on `resume`, so a watermark that passes many windows
    /// does not build all their output at once).
    fn advance(&mut self, limit: usize, out: &mut Output<'_, OUT>) -> Result<()>
    where
        K: serde::Serialize,
    {
        let watermark = self.watermark;
        // Results (keys fired) so far in this call: at least one window
        // per call. Counted as results, not output records, which a window
        // function may pack many to a record.
        let mut results = 0usize;
        while let Some(end) = self.next_end {
            if end - 1 > watermark {
                break;
            }
            let w = TimeWindow::new(end.saturating_sub(self.size), end);
            // Room for as many results as the last window's: the output
            // does not grow by copying itself as the window fires.
            out.records.reserve(self.last_results);
            let (agg, window_fn, fired) = (&*self.agg, &*self.window_fn, &mut self.fired);
            // The window's results are collected, then moved to the output
            // at once with their timestamp.
            fired.clear();
            let collected = self.panes.for_window(
                w.start,
                w.end,
                |a, b| agg.merge(a, b),
                |a, b| agg.retract(a, b),
                |k, acc| {
                    results += 1;
                    collect_result(agg, window_fn, fired, k, w, acc)
                },
            );
            let ts = w.max_timestamp();
            self.last_results = fired.len();
            out.records
                .extend(fired.drain(..).map(|v| Record::with_timestamp(v, ts)));
            collected?;
            self.fired_upto = end;
            self.drop_panes(watermark)?;
            // No next end past the last one inside the timestamp range: the
            // panes left are only kept for their allowed lateness.
            self.next_end = match (self.panes.first(), end.checked_add(self.slide)) {
                (Some(p), Some(next)) => self
                    .end_after(p.saturating_add(self.pane - 1))
                    .map(|first| next.max(first)),
                _ => None,
            };
            if results >= limit {
                break;
            }
        }
        self.drop_panes(watermark)?;
        if self.panes.first().is_none() {
            self.next_end = None;
        }
        Ok(())
    }

    /// Drops the panes whose last window has fired and is past its lateness.
    #[inline]
    fn drop_panes(&mut self, watermark: Timestamp) -> Result<()> {
        while let Some(p) = self.panes.first() {
            let last_end = self.last_end(p);
            let cleanup = (last_end - 1).saturating_add(self.spec.allowed_lateness);
            if last_end <= self.fired_upto && cleanup <= watermark {
                self.panes.pop_first()?;
            } else {
                break;
            }
        }
        Ok(())
    }
}

impl<T, K, ACC, R, OUT, A, S, F> SlicedWindowOp<T, K, ACC, R, OUT, A, S, F>
where
    T: Clone + 'static,
    K: Hash + Eq + Clone,
    ACC: Clone,
    A: AggregateFunction<T, ACC, R>,
    OUT: 'static,
    S: PaneStore<K, ACC>,
    F: Fn(&K, &TimeWindow, R, &mut Vec<OUT>) + ?Sized,
{
    /// After a restore: what had fired by `self.watermark` and which window
    /// fires next follow from the watermark and the panes.
    fn recompute_progress(&mut self) -> Result<()> {
        if self.watermark > MIN_WATERMARK {
            let w1 = self.watermark.saturating_add(1);
            // Past the last end in range, every window has fired.
            self.fired_upto = self
                .end_after(w1)
                .map_or(Timestamp::MAX, |e| e.saturating_sub(self.slide));
        }
        self.next_end = self.panes.first().and_then(|p| self.first_end_for(p));
        self.drop_panes(self.watermark)
    }
}

/// Turns `key`'s accumulator for `w` into output records.
fn emit_result<T, K, ACC, R, OUT, A, F>(
    agg: &A,
    window_fn: &F,
    fired: &mut Vec<OUT>,
    key: &K,
    w: TimeWindow,
    acc: &ACC,
    out: &mut Output<'_, OUT>,
) -> Result<()>
where
    K: serde::Serialize,
    A: AggregateFunction<T, ACC, R>,
    F: Fn(&K, &TimeWindow, R, &mut Vec<OUT>) + ?Sized,
{
    collect_result(agg, window_fn, fired, key, w, acc)?;
    for v in fired.drain(..) {
        out.emit(Record::with_timestamp(v, w.max_timestamp()));
    }
    Ok(())
}

/// Appends the values `key`'s accumulator for `w` gives to `fired` (a
/// free function so a firing can collect while it borrows the panes).
#[inline]
fn collect_result<T, K, ACC, R, OUT, A, F>(
    agg: &A,
    window_fn: &F,
    fired: &mut Vec<OUT>,
    key: &K,
    w: TimeWindow,
    acc: &ACC,
) -> Result<()>
where
    K: serde::Serialize,
    A: AggregateFunction<T, ACC, R>,
    F: Fn(&K, &TimeWindow, R, &mut Vec<OUT>) + ?Sized,
{
    let r = agg
        .try_get_result(acc)
        .map_err(|e| Error::aggregate(key, w, e))?;
    window_fn(key, &w, r, fired);
    Ok(())
}

impl<T, K, ACC, R, OUT, A, S, F> Operator<T, OUT> for SlicedWindowOp<T, K, ACC, R, OUT, A, S, F>
where
    F: Fn(&K, &TimeWindow, R, &mut Vec<OUT>) + Send + Sync + ?Sized + 'static,
    T: Clone + Send + 'static,
    K: StateKey,
    ACC: StateValue,
    R: 'static,
    OUT: Send + 'static,
    A: AggregateFunction<T, ACC, R>,
    S: PaneStore<K, ACC>,
{
    fn metrics_sample(&self) -> floe_actors::metrics::OperatorSample {
        let entries = self.panes.entries();
        self.late.sample(
            entries,
            std::mem::size_of::<K>() + std::mem::size_of::<ACC>(),
        )
    }

    /// The runtime resumes pending firings before a snapshot (see
    /// [`Operator::has_pending`]), so what is captured has fired up to the
    /// watermark.
    fn snapshot_state(&mut self, ctx: &SnapshotContext) -> Result<StateCapture> {
        let capture = self
            .panes
            .capture(ctx.max_parallelism, ctx.checkpoint, ctx.savepoint)?;
        Ok(state_capture(capture))
    }

    fn restore_state(&mut self, state: RestoredState) -> Result<()> {
        self.panes.restore(&state.keyed)?;
        self.recompute_progress()
    }

    fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<()> {
        self.panes.checkpoint_complete(checkpoint);
        Ok(())
    }

    fn notify_checkpoint_aborted(&mut self, checkpoint: CheckpointId) -> Result<()> {
        self.panes.checkpoint_aborted(checkpoint);
        Ok(())
    }

    fn restore_watermark(&mut self, watermark: Timestamp) -> Result<()> {
        if watermark > self.watermark {
            self.watermark = watermark;
            self.recompute_progress()?;
        }
        Ok(())
    }

    fn process_batch(&mut self, batch: Batch<T>, out: &mut Output<'_, OUT>) -> Result<()> {
        if self.firing_pending() && !self.admits_while_pending(&batch) {
            // A late record must not see windows the watermark passed
            // unfired (the node resumes first; this keeps the operator
            // exact alone).
            self.advance(usize::MAX, out)?;
        }
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
        // Windows fire in order of their end: a firing still pending goes
        // on under the new watermark, a part at a time.
        self.watermark = watermark;
        self.advance(self.fire_chunk, out)
    }

    fn has_pending(&self) -> bool {
        self.firing_pending()
    }

    /// A watermark while windows fire: the firing goes on under it (see
    /// `on_watermark`).
    fn admits_watermark_while_pending(&self) -> bool {
        true
    }

    /// A batch of records all past the watermark: each lands in panes past
    /// every window the watermark passed (a window's end is a pane's
    /// start, at most the watermark + 1), and so past the last fired
    /// window's kept merge too, and emits nothing. A late record waits
    /// for the windows to fire: it is late, or fires late, against them.
    fn admits_while_pending(&self, batch: &Batch<T>) -> bool {
        let watermark = self.watermark;
        batch
            .iter()
            .all(|r| r.timestamp.is_some_and(|ts| ts > watermark))
    }

    fn resume(&mut self, out: &mut Output<'_, OUT>) -> Result<()> {
        self.advance(self.fire_chunk, out)
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod oracle_tests;
