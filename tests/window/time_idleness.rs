//! Idleness: a silent source must not hold back event time once its idle
//! timeout has passed on the (manual) processing-time clock.
//!
//! Two sources feed one tumbling event-time window. Source A emits its events
//! and then stays open; source B never emits. Without idleness no window could
//! fire while B is open (the window's watermark is the minimum over its
//! inputs). With `with_idleness` on B's strategy and the manual clock moved
//! past the timeout, B turns idle and A's watermark fires A's windows while
//! both sources are still running; the results match a plain recomputation.

use floe::connectors::{SourceFunction, SourcePoll};
use floe::operators::sink::SinkFunction;
use floe::time::{ManualClock, WatermarkStrategy};
use floe::window::{TimeWindow, WindowAssigner};
use floe::{Record, StreamExecutionEnvironment};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Ev = (u32, i64, i64);

/// Emits `events` once, then waits (open, silent) until released.
struct HeldSource {
    events: Vec<Ev>,
    sent: bool,
    release: Arc<AtomicBool>,
}

impl SourceFunction<Ev> for HeldSource {
    fn poll_batch(&mut self, _max: usize, out: &mut Vec<Record<Ev>>) -> floe::Result<SourcePoll> {
        if !self.sent {
            self.sent = true;
            out.extend(self.events.drain(..).map(Record::new));
            return Ok(SourcePoll::Ready);
        }
        if self.release.load(Ordering::SeqCst) {
            Ok(SourcePoll::Finished)
        } else {
            Ok(SourcePoll::Wait(Duration::from_millis(1)))
        }
    }
}

#[derive(Clone)]
struct Report(Arc<Mutex<mpsc::Sender<(i64, i64)>>>);

impl SinkFunction<(i64, i64)> for Report {
    async fn write(&mut self, batch: floe::Batch<(i64, i64)>) -> floe::Result<()> {
        for r in batch {
            let v = r.value;
            let _ = self.0.lock().expect("sender lock").send(v);
        }
        Ok(())
    }
}

#[test]
fn idle_source_does_not_hold_back_windows() {
    let a_events: Vec<Ev> = (0..=200)
        .map(|i| (i % 3, i as i64 * 10, i as i64))
        .collect();
    let release = Arc::new(AtomicBool::new(false));
    let clock = ManualClock::new(0);
    let (tx, rx) = mpsc::channel();

    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    let strategy = |idle: bool| {
        let s = WatermarkStrategy::<Ev>::monotonous_timestamps()
            .with_timestamp_assigner(|e, _| e.1)
            .per_record()
            .with_clock(Arc::new(clock.clone()));
        if idle {
            s.with_idleness(Duration::from_millis(1000))
        } else {
            s
        }
    };
    let (ra, rb) = (release.clone(), release.clone());
    let evs = a_events.clone();
    let a = env
        .add_source("A", move |_| {
            Ok(HeldSource {
                events: evs.clone(),
                sent: false,
                release: ra.clone(),
            })
        })
        .set_parallelism(1)
        .assign_timestamps_and_watermarks(strategy(false))
        .set_parallelism(1);
    let b = env
        .add_source("B", move |_| {
            Ok(HeldSource {
                events: Vec::new(),
                sent: false,
                release: rb.clone(),
            })
        })
        .set_parallelism(1)
        .assign_timestamps_and_watermarks(strategy(true))
        .set_parallelism(1);
    a.union(&[&b])
        .key_by(|e: &Ev| e.0)
        .window(WindowAssigner::tumbling(100))
        .aggregate_with(
            Sum,
            |_: &u32, w: &TimeWindow, s: i64, out: &mut Vec<(i64, i64)>| out.push((w.start, s)),
        )
        .sink("Report", Report(Arc::new(Mutex::new(tx))));
    let handle = env.execute_async().expect("job starts");

    // A's watermark ends at 1999: windows [0,100) .. [1900,2000) can fire.
    let mut want: BTreeMap<(i64, i64), usize> = BTreeMap::new();
    let mut sums: BTreeMap<(u32, i64), i64> = BTreeMap::new();
    for e in &a_events {
        *sums.entry((e.0, e.1 - e.1.rem_euclid(100))).or_default() += e.2;
    }
    for ((_, start), s) in &sums {
        if start + 100 - 1 <= 1999 {
            *want.entry((*start, *s)).or_default() += 1;
        }
    }
    let expected: usize = want.values().sum();

    // B never carries a record; move its clock on until it passes the idle
    // timeout (advancing while waiting, so it does not matter when B's
    // operator started counting).
    let mut got: BTreeMap<(i64, i64), usize> = BTreeMap::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while got.values().sum::<usize>() < expected {
        assert!(
            std::time::Instant::now() < deadline,
            "windows fire while the silent source is idle"
        );
        clock.advance(2_000);
        if let Ok(v) = rx.recv_timeout(Duration::from_millis(100)) {
            *got.entry(v).or_default() += 1;
        }
    }
    assert!(!release.load(Ordering::SeqCst));
    assert_eq!(got, want, "firings before the sources finished");

    release.store(true, Ordering::SeqCst);
    futures::executor::block_on(handle.wait()).expect("job finishes");
    // The last window [2000, 2100) fires at the end of input.
    let rest: Vec<(i64, i64)> = rx.try_iter().collect();
    let last: Vec<(i64, i64)> = sums
        .iter()
        .filter(|((_, s), _)| *s == 2000)
        .map(|((_, s), v)| (*s, *v))
        .collect();
    let mut rest_sorted = rest.clone();
    rest_sorted.sort();
    let mut last_sorted = last;
    last_sorted.sort();
    assert_eq!(rest_sorted, last_sorted);
}

struct Sum;

impl floe::window::AggregateFunction<Ev, i64, i64> for Sum {
    fn create_accumulator(&self) -> i64 {
        0
    }
    fn add(&self, e: &Ev, acc: &mut i64) {
        *acc += e.2;
    }
    fn get_result(&self, acc: &i64) -> i64 {
        *acc
    }
    fn merge(&self, a: i64, b: i64) -> i64 {
        a + b
    }
}
