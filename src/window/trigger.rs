//! Triggers and evictors: when a window fires, and which records it keeps.
//!
//! A trigger answers `on_element`, `on_event_time` and `on_processing_time`
//! with a [`TriggerResult`], and may register timers through its context. Its
//! per-window state is a small [`TriggerState`] kept with the window (a count,
//! the next firing time and two free slots for custom triggers). An evictor
//! removes records from a window before (and after) the window function runs.

use super::assigner::TimeWindow;
use floe_actors::element::{Record, Timestamp};

/// What a trigger decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TriggerResult {
    /// Do nothing.
    Continue,
    /// Emit the window's result; keep its contents.
    Fire,
    /// Drop the window's contents without emitting.
    Purge,
    /// Emit, then drop the contents.
    FireAndPurge,
}

impl TriggerResult {
    /// True for `Fire` and `FireAndPurge`.
    pub fn fires(self) -> bool {
        matches!(self, TriggerResult::Fire | TriggerResult::FireAndPurge)
    }

    /// True for `Purge` and `FireAndPurge`.
    pub fn purges(self) -> bool {
        matches!(self, TriggerResult::Purge | TriggerResult::FireAndPurge)
    }
}

/// Per-window trigger state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TriggerState {
    /// Records counted since the last firing (count triggers).
    pub count: u64,
    /// The next firing time (continuous triggers).
    pub next: Option<Timestamp>,
    /// Free for custom triggers.
    pub slots: [i64; 2],
}

/// A timer a trigger asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimerRequest {
    /// Call `on_event_time` when the watermark reaches this time.
    EventTime(Timestamp),
    /// Call `on_processing_time` when the clock reaches this time.
    ProcessingTime(Timestamp),
}

/// What a trigger sees: time, its window state and a way to ask for timers.
pub struct TriggerContext<'a> {
    /// The operator's current watermark.
    pub watermark: Timestamp,
    /// The current processing time (ms).
    pub processing_time: Timestamp,
    /// The window's trigger state.
    pub state: &'a mut TriggerState,
    pub(crate) timers: &'a mut Vec<TimerRequest>,
}

impl TriggerContext<'_> {
    /// Asks for `on_event_time(time)` once the watermark passes `time`.
    pub fn register_event_time_timer(&mut self, time: Timestamp) {
        self.timers.push(TimerRequest::EventTime(time));
    }

    /// Asks for `on_processing_time(time)` once the clock passes `time`.
    pub fn register_processing_time_timer(&mut self, time: Timestamp) {
        self.timers.push(TimerRequest::ProcessingTime(time));
    }
}

/// Decides when a window fires (Flink's `Trigger`).
pub trait Trigger<T>: Send + Sync + 'static {
    /// A record was added to `window`.
    fn on_element(
        &self,
        value: &T,
        timestamp: Timestamp,
        window: &TimeWindow,
        ctx: &mut TriggerContext<'_>,
    ) -> TriggerResult;

    /// An event-time timer of this window fired.
    fn on_event_time(
        &self,
        _time: Timestamp,
        _window: &TimeWindow,
        _ctx: &mut TriggerContext<'_>,
    ) -> TriggerResult {
        TriggerResult::Continue
    }

    /// A processing-time timer of this window fired.
    fn on_processing_time(
        &self,
        _time: Timestamp,
        _window: &TimeWindow,
        _ctx: &mut TriggerContext<'_>,
    ) -> TriggerResult {
        TriggerResult::Continue
    }
}

/// Fires when the watermark passes the window's end (the default for
/// event-time windows); a record into a window already past fires at once.
#[derive(Clone, Copy, Debug, Default)]
pub struct EventTimeTrigger;

impl<T> Trigger<T> for EventTimeTrigger {
    fn on_element(
        &self,
        _: &T,
        _: Timestamp,
        w: &TimeWindow,
        ctx: &mut TriggerContext<'_>,
    ) -> TriggerResult {
        if w.max_timestamp() <= ctx.watermark {
            TriggerResult::Fire
        } else {
            ctx.register_event_time_timer(w.max_timestamp());
            TriggerResult::Continue
        }
    }

    fn on_event_time(
        &self,
        time: Timestamp,
        w: &TimeWindow,
        _: &mut TriggerContext<'_>,
    ) -> TriggerResult {
        if time == w.max_timestamp() {
            TriggerResult::Fire
        } else {
            TriggerResult::Continue
        }
    }
}

/// Never fires (the default trigger of global windows).
#[derive(Clone, Copy, Debug, Default)]
pub struct NeverTrigger;

impl<T> Trigger<T> for NeverTrigger {
    fn on_element(
        &self,
        _: &T,
        _: Timestamp,
        _: &TimeWindow,
        _: &mut TriggerContext<'_>,
    ) -> TriggerResult {
        TriggerResult::Continue
    }
}

/// Fires when the processing-time clock passes the window's end.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessingTimeTrigger;

impl<T> Trigger<T> for ProcessingTimeTrigger {
    fn on_element(
        &self,
        _: &T,
        _: Timestamp,
        w: &TimeWindow,
        ctx: &mut TriggerContext<'_>,
    ) -> TriggerResult {
        ctx.register_processing_time_timer(w.max_timestamp());
        TriggerResult::Continue
    }

    fn on_processing_time(
        &self,
        _: Timestamp,
        _: &TimeWindow,
        _: &mut TriggerContext<'_>,
    ) -> TriggerResult {
        TriggerResult::Fire
    }
}

/// Fires every `n` records of a window.
#[derive(Clone, Copy, Debug)]
pub struct CountTrigger(pub u64);

impl<T> Trigger<T> for CountTrigger {
    fn on_element(
        &self,
        _: &T,
        _: Timestamp,
        _: &TimeWindow,
        ctx: &mut TriggerContext<'_>,
    ) -> TriggerResult {
        ctx.state.count += 1;
        if ctx.state.count >= self.0.max(1) {
            ctx.state.count = 0;
            TriggerResult::Fire
        } else {
            TriggerResult::Continue
        }
    }
}

/// Turns every firing of the inner trigger into fire-and-purge.
pub struct PurgingTrigger<G>(pub G);

impl<T, G: Trigger<T>> Trigger<T> for PurgingTrigger<G> {
    fn on_element(
        &self,
        v: &T,
        ts: Timestamp,
        w: &TimeWindow,
        ctx: &mut TriggerContext<'_>,
    ) -> TriggerResult {
        purging(self.0.on_element(v, ts, w, ctx))
    }
    fn on_event_time(
        &self,
        t: Timestamp,
        w: &TimeWindow,
        ctx: &mut TriggerContext<'_>,
    ) -> TriggerResult {
        purging(self.0.on_event_time(t, w, ctx))
    }
    fn on_processing_time(
        &self,
        t: Timestamp,
        w: &TimeWindow,
        ctx: &mut TriggerContext<'_>,
    ) -> TriggerResult {
        purging(self.0.on_processing_time(t, w, ctx))
    }
}

fn purging(r: TriggerResult) -> TriggerResult {
    if r.fires() {
        TriggerResult::FireAndPurge
    } else {
        r
    }
}

/// Fires every `interval` ms of event time while the window is open, and at
/// its end (Flink's `ContinuousEventTimeTrigger`).
#[derive(Clone, Copy, Debug)]
pub struct ContinuousEventTimeTrigger(pub i64);

impl<T> Trigger<T> for ContinuousEventTimeTrigger {
    fn on_element(
        &self,
        _: &T,
        ts: Timestamp,
        w: &TimeWindow,
        ctx: &mut TriggerContext<'_>,
    ) -> TriggerResult {
        if w.max_timestamp() <= ctx.watermark {
            return TriggerResult::Fire;
        }
        ctx.register_event_time_timer(w.max_timestamp());
        if ctx.state.next.is_none() {
            let interval = self.0.max(1);
            let next = ts - ts.rem_euclid(interval) + interval;
            ctx.state.next = Some(next);
            ctx.register_event_time_timer(next);
        }
        TriggerResult::Continue
    }

    fn on_event_time(
        &self,
        time: Timestamp,
        w: &TimeWindow,
        ctx: &mut TriggerContext<'_>,
    ) -> TriggerResult {
        if time == w.max_timestamp() {
            return TriggerResult::Fire;
        }
        if ctx.state.next == Some(time) {
            let next = time + self.0.max(1);
            ctx.state.next = Some(next);
            ctx.register_event_time_timer(next);
            return TriggerResult::Fire;
        }
        TriggerResult::Continue
    }
}

/// Removes records from a window around the window function.
pub trait Evictor<T>: Send + Sync + 'static {
    /// Before the window function: drop records from `records`.
    fn evict_before(&self, records: &mut Vec<Record<T>>, window: &TimeWindow);
    /// After the window function.
    fn evict_after(&self, _records: &mut Vec<Record<T>>, _window: &TimeWindow) {}
}

/// Keeps the last `n` records.
#[derive(Clone, Copy, Debug)]
pub struct CountEvictor(pub usize);

impl<T> Evictor<T> for CountEvictor {
    fn evict_before(&self, records: &mut Vec<Record<T>>, _: &TimeWindow) {
        if records.len() > self.0 {
            let drop = records.len() - self.0;
            records.drain(..drop);
        }
    }
}

/// Keeps the records within `ms` of the newest record's timestamp.
#[derive(Clone, Copy, Debug)]
pub struct TimeEvictor(pub i64);

impl<T> Evictor<T> for TimeEvictor {
    fn evict_before(&self, records: &mut Vec<Record<T>>, _: &TimeWindow) {
        let Some(max) = records.iter().filter_map(|r| r.timestamp).max() else {
            return;
        };
        let cutoff = max - self.0;
        records.retain(|r| r.timestamp.is_none_or(|t| t > cutoff));
    }
}
