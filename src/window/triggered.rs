//! Windows with a custom trigger or evictor, and global windows.
//!
//! The window keeps its records (evictors need them); on firing, the evictor
//! trims them and the aggregate runs over what is left. Timers requested by the
//! trigger are kept in a [`TimerService`] by (key, window); event-time timers fire as the watermark
//! passes them, processing-time timers when the clock has passed them at the
//! next batch or watermark. Time windows are also cleaned up at
//! `max_timestamp + allowed_lateness`; a global window lives until the job ends.

use super::assigner::{TimeWindow, WindowAssigner};
use super::function::{AggregateFunction, WindowFunction};
use super::operator::WindowSpec;
use super::trigger::{Evictor, TimerRequest, Trigger, TriggerContext, TriggerResult, TriggerState};
use crate::operators::keyed::KeyFn;
use crate::operators::{Operator, Output};
use crate::time::{Clock, TimeDomain, TimerService};
use crate::{Error, Result};
use floe_actors::element::{Batch, MIN_WATERMARK, Record, Timestamp};
use rustc_hash::FxHashMap;
use std::hash::Hash;
use std::sync::Arc;

/// The processing-time clock of triggers (ms).
pub type ClockFn = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// The system clock in ms since the epoch.
pub fn system_clock() -> ClockFn {
    Arc::new(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    })
}

/// A [`ClockFn`] as the timer service's clock.
struct FnClock(ClockFn);

impl Clock for FnClock {
    fn now_ms(&self) -> Timestamp {
        (self.0)()
    }
}

/// A timer's domain in a snapshot: 0 event time, 1 processing time.
fn domain_code(domain: TimeDomain) -> u8 {
    match domain {
        TimeDomain::EventTime => 0,
        TimeDomain::ProcessingTime => 1,
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Entry<T> {
    window: TimeWindow,
    records: Vec<Record<T>>,
    state: TriggerState,
}

/// One key's checkpointed windows and timers (0 = event time, 1 =
/// processing time).
#[derive(serde::Serialize, serde::Deserialize)]
struct KeySnapshot<E, W> {
    entries: E,
    timers: Vec<(u8, Timestamp, W)>,
}

/// Keyed windows driven by a trigger, with an optional evictor.
pub struct TriggeredWindowOp<T, K, ACC, R, OUT, A> {
    key: KeyFn<T, K>,
    spec: WindowSpec<T>,
    trigger: Arc<dyn Trigger<T>>,
    evictor: Option<Arc<dyn Evictor<T>>>,
    agg: Arc<A>,
    window_fn: WindowFunction<K, R, OUT>,
    watermark: Timestamp,
    state: FxHashMap<K, Vec<Entry<T>>>,
    /// The trigger's timers and the cleanup timers, per (key, window); its
    /// clock is the operator's processing time.
    timers: TimerService<(K, TimeWindow)>,
    requests: Vec<TimerRequest>,
    fired: Vec<OUT>,
    late: super::operator::LateCounts,
    _acc: std::marker::PhantomData<fn() -> ACC>,
}

impl<T, K, ACC, R, OUT, A> TriggeredWindowOp<T, K, ACC, R, OUT, A> {
    /// A window operator with `trigger` and `evictor`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        key: KeyFn<T, K>,
        spec: WindowSpec<T>,
        trigger: Arc<dyn Trigger<T>>,
        evictor: Option<Arc<dyn Evictor<T>>>,
        clock: ClockFn,
        agg: Arc<A>,
        window_fn: WindowFunction<K, R, OUT>,
    ) -> Self {
        TriggeredWindowOp {
            key,
            spec,
            trigger,
            evictor,
            agg,
            window_fn,
            watermark: MIN_WATERMARK,
            state: FxHashMap::default(),
            timers: TimerService::new(Arc::new(FnClock(clock))),
            requests: Vec::new(),
            fired: Vec::new(),
            late: Default::default(),
            _acc: std::marker::PhantomData,
        }
    }
}

impl<T, K, ACC, R, OUT, A> TriggeredWindowOp<T, K, ACC, R, OUT, A>
where
    T: Clone + 'static,
    K: Hash + Eq + Clone + serde::Serialize,
    A: AggregateFunction<T, ACC, R>,
    OUT: 'static,
{
    fn global(&self) -> bool {
        matches!(self.spec.assigner, WindowAssigner::Global)
    }

    fn processing(&self) -> bool {
        self.spec.assigner.is_processing_time()
    }

    fn is_late(&self, w: &TimeWindow) -> bool {
        !self.global() && !self.processing() && self.spec.is_late(w, self.watermark)
    }

    /// When a time window's state goes: `max_timestamp + allowed_lateness`,
    /// in event time or (processing-time windows) in processing time.
    fn cleanup_time(&self, w: &TimeWindow) -> Option<Timestamp> {
        (!self.global()).then(|| w.max_timestamp().saturating_add(self.spec.allowed_lateness))
    }

    fn apply_requests(&mut self, key: &K, w: TimeWindow) {
        for r in self.requests.drain(..) {
            let (domain, t) = match r {
                TimerRequest::EventTime(t) => (TimeDomain::EventTime, t),
                TimerRequest::ProcessingTime(t) => (TimeDomain::ProcessingTime, t),
            };
            self.timers.register(domain, &(key.clone(), w), t);
        }
    }

    /// Runs `f` on the trigger with the window's state; applies its timers and result.
    fn with_trigger(
        &mut self,
        key: &K,
        w: TimeWindow,
        out: &mut Output<'_, OUT>,
        f: impl FnOnce(&dyn Trigger<T>, &mut TriggerContext<'_>) -> TriggerResult,
    ) -> Result<()> {
        let now = self.timers.current_processing_time();
        let watermark = self.watermark;
        let trigger = self.trigger.clone();
        let Some(entry) = self
            .state
            .get_mut(key)
            .and_then(|es| es.iter_mut().find(|e| e.window == w))
        else {
            return Ok(());
        };
        let mut ctx = TriggerContext {
            watermark,
            processing_time: now,
            state: &mut entry.state,
            timers: &mut self.requests,
        };
        let result = f(&*trigger, &mut ctx);
        self.apply_requests(key, w);
        self.handle(key, w, result, out)
    }

    fn handle(
        &mut self,
        key: &K,
        w: TimeWindow,
        result: TriggerResult,
        out: &mut Output<'_, OUT>,
    ) -> Result<()> {
        if result == TriggerResult::Continue {
            return Ok(());
        }
        let Some(entry) = self
            .state
            .get_mut(key)
            .and_then(|es| es.iter_mut().find(|e| e.window == w))
        else {
            return Ok(());
        };
        if result.fires() && !entry.records.is_empty() {
            if let Some(ev) = &self.evictor {
                ev.evict_before(&mut entry.records, &w);
            }
            let mut acc = self.agg.create_accumulator();
            for r in &entry.records {
                self.agg.add(&r.value, &mut acc);
            }
            if let Some(ev) = &self.evictor {
                ev.evict_after(&mut entry.records, &w);
            }
            let r = self
                .agg
                .try_get_result(&acc)
                .map_err(|e| Error::aggregate(key, w, e))?;
            (self.window_fn)(key, &w, r, &mut self.fired);
            for v in self.fired.drain(..) {
                out.emit(Record::with_timestamp(v, w.max_timestamp()));
            }
        }
        if result.purges() {
            entry.records.clear();
        }
        Ok(())
    }

    fn remove(&mut self, key: &K, w: TimeWindow) {
        if let Some(es) = self.state.get_mut(key) {
            es.retain(|e| e.window != w);
            if es.is_empty() {
                self.state.remove(key);
            }
        }
    }

    fn element(&mut self, value: &T, ts: Timestamp, out: &mut Output<'_, OUT>) -> Result<bool> {
        let key = self.key.with_key(value, K::clone);
        let mut windows = Vec::new();
        self.spec
            .assigner
            .try_assign(value, ts, |w| windows.push(w))?;
        let mut live = false;
        for w in windows {
            if self.is_late(&w) {
                continue;
            }
            live = true;
            let entries = self.state.entry(key.clone()).or_default();
            let created = match entries.iter_mut().find(|e| e.window == w) {
                Some(e) => {
                    e.records.push(Record::with_timestamp(value.clone(), ts));
                    false
                }
                None => {
                    entries.push(Entry {
                        window: w,
                        records: vec![Record::with_timestamp(value.clone(), ts)],
                        state: TriggerState::default(),
                    });
                    true
                }
            };
            if created && let Some(t) = self.cleanup_time(&w) {
                self.requests.push(if self.processing() {
                    TimerRequest::ProcessingTime(t)
                } else {
                    TimerRequest::EventTime(t)
                });
                self.apply_requests(&key, w);
            }
            self.with_trigger(&key, w, out, |t, ctx| t.on_element(value, ts, &w, ctx))?;
        }
        Ok(live)
    }

    fn fire_processing_timers(&mut self, out: &mut Output<'_, OUT>) -> Result<()> {
        let now = self.timers.current_processing_time();
        while let Some((t, (key, w))) = self.timers.pop_due(TimeDomain::ProcessingTime, now) {
            self.with_trigger(&key, w, out, |g, ctx| g.on_processing_time(t, &w, ctx))?;
            if self.processing() && self.cleanup_time(&w) == Some(t) {
                self.remove(&key, w);
            }
        }
        Ok(())
    }
}

impl<T, K, ACC, R, OUT, A> Operator<T, OUT> for TriggeredWindowOp<T, K, ACC, R, OUT, A>
where
    T: crate::state::StateValue,
    K: crate::state::StateKey,
    ACC: Send + 'static,
    R: 'static,
    OUT: Send + 'static,
    A: AggregateFunction<T, ACC, R>,
{
    fn metrics_sample(&self) -> floe_actors::metrics::OperatorSample {
        let entries = self.state.values().map(Vec::len).sum();
        self.late.sample(
            entries,
            std::mem::size_of::<K>() + std::mem::size_of::<Entry<T>>(),
        )
    }

    fn snapshot_state(
        &mut self,
        ctx: &crate::operators::SnapshotContext,
    ) -> Result<crate::operators::StateCapture> {
        let mut per_key: FxHashMap<&K, KeySnapshot<&Vec<Entry<T>>, TimeWindow>> =
            FxHashMap::default();
        let empty = Vec::new();
        for (k, entries) in &self.state {
            per_key.insert(
                k,
                KeySnapshot {
                    entries,
                    timers: Vec::new(),
                },
            );
        }
        for (domain, t, (k, w)) in self.timers.iter() {
            per_key
                .entry(k)
                .or_insert_with(|| KeySnapshot {
                    entries: &empty,
                    timers: Vec::new(),
                })
                .timers
                .push((domain_code(domain), t, *w));
        }
        let groups = crate::operators::keyed_snapshot::encode(per_key.iter(), ctx.max_parallelism)?;
        Ok(crate::operators::StateCapture::keyed_bytes(groups))
    }

    fn restore_state(&mut self, state: crate::operators::RestoredState) -> Result<()> {
        self.state.clear();
        self.timers.clear(TimeDomain::EventTime);
        self.timers.clear(TimeDomain::ProcessingTime);
        let (map, timers) = (&mut self.state, &mut self.timers);
        crate::operators::keyed_snapshot::decode::<K, KeySnapshot<Vec<Entry<T>>, TimeWindow>>(
            &state.keyed,
            |k, snap| {
                for (domain, t, w) in snap.timers {
                    let domain = if domain == 0 {
                        TimeDomain::EventTime
                    } else {
                        TimeDomain::ProcessingTime
                    };
                    timers.register(domain, &(k.clone(), w), t);
                }
                if !snap.entries.is_empty() {
                    map.insert(k, snap.entries);
                }
            },
        )
    }

    fn restore_watermark(&mut self, watermark: Timestamp) -> Result<()> {
        self.watermark = self.watermark.max(watermark);
        Ok(())
    }

    fn process_batch(&mut self, batch: Batch<T>, out: &mut Output<'_, OUT>) -> Result<()> {
        self.fire_processing_timers(out)?;
        for r in batch {
            let ts = match (r.timestamp, self.global()) {
                _ if self.processing() => self.timers.current_processing_time(),
                (None, true) => MIN_WATERMARK,
                (ts, _) => WindowSpec::<T>::event_time(ts)?,
            };
            if !self.element(&r.value, ts, out)? {
                self.spec
                    .route_late(r.value, ts, self.watermark, &mut self.late, out);
            }
        }
        Ok(())
    }

    fn on_processing_time(&mut self, _now_ms: Timestamp, out: &mut Output<'_, OUT>) -> Result<()> {
        self.fire_processing_timers(out)
    }

    fn on_watermark(&mut self, watermark: Timestamp, out: &mut Output<'_, OUT>) -> Result<()> {
        if watermark <= self.watermark {
            return Ok(());
        }
        self.watermark = watermark;
        while let Some((t, (key, w))) = self.timers.pop_due(TimeDomain::EventTime, watermark) {
            self.with_trigger(&key, w, out, |g, ctx| g.on_event_time(t, &w, ctx))?;
            if !self.processing() && self.cleanup_time(&w) == Some(t) {
                self.remove(&key, w);
            }
        }
        self.fire_processing_timers(out)
    }
}
