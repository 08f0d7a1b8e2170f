//! `floe run window --state heap|redb`: the windows of the built-in window
//! operator, computed by a keyed process function through the state API, so
//! that a state backend (and its snapshots) holds them.
//!
//! Each key's open windows live in one `MapState<start, Pane>`; a window
//! fires from an event-time timer at its last timestamp (`end - 1`) and is
//! dropped from a timer at `end - 1 + allowed_lateness`. The rules are the
//! built-in operator's (Flink's): a record whose every window is already
//! past its lateness is skipped, and written to the late output when its
//! own timestamp is past it too; a record added to a window whose firing
//! time has passed fires that window again at once; session windows merge
//! every window their new window intersects, transitively.
//!
//! Timers of windows absorbed by a merge are left registered: a timer acts
//! only on the windows whose times equal it, so a stale one does nothing.
//!
//! Windows come from the same assigner (`try_assign`) and results from the
//! same checked aggregate (`try_get_result`) as in the built-in operator, so
//! an out-of-range timestamp or an overflowing sum fails the same way.

use super::window::{Agg, Event, Firing};
use floe::operators::keyed::KeyedProcessFunction;
use floe::operators::process::{OnTimerContext, ProcessContext};
use floe::state::MapStateDescriptor;
use floe::window::{AggregateFunction, TimeWindow, WindowAssigner};
use floe::{OutputTag, Timestamp};

/// One open window of a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Pane {
    /// The window's end (exclusive).
    end: Timestamp,
    /// The aggregate of its records so far (see `Agg`).
    acc: i128,
}

/// The windowing of `floe run window` as a keyed process function.
#[derive(Clone)]
pub struct StateWindows {
    assigner: WindowAssigner<Event>,
    agg: Agg,
    lateness: i64,
    late: OutputTag<Event>,
    windows: MapStateDescriptor<Timestamp, Pane>,
}

/// A firing decided while the window state was borrowed.
type Fired = (Timestamp, Pane);

impl StateWindows {
    pub fn new(
        assigner: WindowAssigner<Event>,
        agg: Agg,
        lateness: i64,
        late: OutputTag<Event>,
    ) -> Self {
        StateWindows {
            assigner,
            agg,
            lateness,
            late,
            windows: MapStateDescriptor::new("windows"),
        }
    }

    /// When a window ending at `end` is dropped.
    fn cleanup_time(&self, end: Timestamp) -> Timestamp {
        (end - 1).saturating_add(self.lateness)
    }

    /// The output line of a firing, or the aggregate's failure naming the
    /// key and the window.
    fn line(&self, key: &String, (start, pane): Fired) -> floe::Result<Firing> {
        let value = self
            .agg
            .try_get_result(&pane.acc)
            .map_err(|e| floe::Error::aggregate(key, TimeWindow::new(start, pane.end), e))?;
        Ok(Firing {
            key: key.as_str().into(),
            start,
            end: pane.end,
            value,
        })
    }

    /// Adds `e` to each of its (non-merging) windows that is not past its
    /// lateness; returns whether any was, the windows to fire now and the
    /// timers to register.
    fn add_aligned(
        &self,
        e: &Event,
        windows: &[TimeWindow],
        wm: Timestamp,
        ctx: &mut ProcessContext<'_, '_, Firing, String>,
        fired: &mut Vec<Fired>,
        timers: &mut Vec<Timestamp>,
    ) -> floe::Result<bool> {
        let mut live = false;
        let mut map = ctx.map_state(&self.windows)?;
        for w in windows {
            if self.cleanup_time(w.end) <= wm {
                continue;
            }
            live = true;
            let mut pane = match map.get(&w.start)? {
                Some(p) => p,
                None => {
                    timers.push(w.max_timestamp());
                    timers.push(self.cleanup_time(w.end));
                    Pane {
                        end: w.end,
                        acc: self.agg.create_accumulator(),
                    }
                }
            };
            self.agg.add(e, &mut pane.acc);
            map.put(w.start, pane)?;
            if w.max_timestamp() <= wm {
                fired.push((w.start, pane));
            }
        }
        Ok(live)
    }

    /// Merges `e`'s session window with every window of its key it
    /// intersects (transitively); returns whether it was kept.
    fn add_merging(
        &self,
        e: &Event,
        window: TimeWindow,
        wm: Timestamp,
        ctx: &mut ProcessContext<'_, '_, Firing, String>,
        fired: &mut Vec<Fired>,
        timers: &mut Vec<Timestamp>,
    ) -> floe::Result<bool> {
        let mut map = ctx.map_state(&self.windows)?;
        let mut open: Vec<Fired> = map.iter()?.map(|(s, p)| (*s, *p)).collect();
        let (mut start, mut end) = (window.start, window.end);
        let mut absorbed: Vec<Fired> = Vec::new();
        while let Some(j) = open.iter().position(|(s, p)| *s <= end && p.end >= start) {
            let (s, p) = open.swap_remove(j);
            start = start.min(s);
            end = end.max(p.end);
            absorbed.push((s, p));
        }
        if absorbed.is_empty() && self.cleanup_time(end) <= wm {
            return Ok(false);
        }
        let mut acc = self.agg.create_accumulator();
        for (s, p) in &absorbed {
            acc = self.agg.merge(acc, p.acc);
            map.remove(s)?;
        }
        self.agg.add(e, &mut acc);
        let pane = Pane { end, acc };
        map.put(start, pane)?;
        if end - 1 <= wm {
            fired.push((start, pane));
        } else {
            timers.push(end - 1);
        }
        timers.push(self.cleanup_time(end));
        Ok(true)
    }
}

impl KeyedProcessFunction<String, Event, Firing> for StateWindows {
    fn process_element(
        &mut self,
        e: Event,
        ctx: &mut ProcessContext<'_, '_, Firing, String>,
    ) -> floe::Result<()> {
        let wm = ctx.current_watermark();
        let mut windows = Vec::new();
        self.assigner.try_assign(&e, e.ts, |w| windows.push(w))?;
        let (mut fired, mut timers) = (Vec::new(), Vec::new());
        let live = if self.assigner.is_merging() {
            match windows.first() {
                Some(&w) => self.add_merging(&e, w, wm, ctx, &mut fired, &mut timers)?,
                None => false,
            }
        } else {
            self.add_aligned(&e, &windows, wm, ctx, &mut fired, &mut timers)?
        };
        for t in timers {
            if t > wm {
                ctx.register_event_time_timer(t);
            }
        }
        if !fired.is_empty() {
            let key = ctx.current_key().cloned().unwrap_or_default();
            for f in fired {
                ctx.collect(self.line(&key, f)?);
            }
        }
        if !live && e.ts.saturating_add(self.lateness) <= wm {
            ctx.output(&self.late, e);
        }
        Ok(())
    }

    fn on_timer(
        &mut self,
        timestamp: Timestamp,
        ctx: &mut OnTimerContext<'_, '_, Firing, String>,
    ) -> floe::Result<()> {
        let mut fired = Vec::new();
        {
            let mut map = ctx.map_state(&self.windows)?;
            let open: Vec<Fired> = map.iter()?.map(|(s, p)| (*s, *p)).collect();
            for (start, pane) in open {
                if pane.end - 1 == timestamp {
                    fired.push((start, pane));
                }
                if self.cleanup_time(pane.end) <= timestamp {
                    map.remove(&start)?;
                }
            }
        }
        let key = ctx.current_key().clone();
        for f in fired {
            ctx.collect(self.line(&key, f)?);
        }
        Ok(())
    }
}
