//! Count windows, custom triggers and evictors against plain recomputations.
//!
//! One source subtask keeps every key's records in arrival order, so the
//! oracle can replay each key's sequence: count windows fire on every n-th
//! record of a key, sliding count windows see the last `size` records, and a
//! count trigger on event-time windows fires every n records of a window with
//! the running aggregate (no event-time firing: the trigger replaces it).

use floe::StreamExecutionEnvironment;
use floe::time::WatermarkStrategy;
use floe::window::{
    ContinuousEventTimeTrigger, CountEvictor, CountTrigger, TimeEvictor, TimeWindow, WindowAssigner,
};
use std::collections::HashMap;

use crate::rng;

type Ev = (u32, i64, i64); // key, timestamp, value

fn events(n: usize, keys: u32, seed: u64) -> Vec<Ev> {
    let mut rng = rng::SplitMix(seed);
    (0..n)
        .map(|i| {
            let r = rng.next();
            (
                (r % keys as u64) as u32,
                i as i64 * 3,
                (r >> 40) as i64 % 100,
            )
        })
        .collect()
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

#[test]
fn tumbling_count_windows_fire_every_n_records_per_key() {
    let input = events(3000, 7, 11);
    for p in [1, 3] {
        let env = StreamExecutionEnvironment::new();
        env.set_parallelism(p);
        let out = env
            .from_collection(input.clone())
            .key_by(|e: &Ev| e.0)
            .count_window(4)
            .aggregate_with(
                Sum,
                |k: &u32, _: &TimeWindow, s: i64, out: &mut Vec<(u32, i64)>| out.push((*k, s)),
            )
            .collect();
        env.execute().expect("job runs");
        let mut per_key: HashMap<u32, Vec<i64>> = HashMap::new();
        for e in &input {
            per_key.entry(e.0).or_default().push(e.2);
        }
        let want: Vec<(u32, i64)> = per_key
            .iter()
            .flat_map(|(k, vs)| vs.chunks_exact(4).map(move |c| (*k, c.iter().sum())))
            .collect();
        assert_eq!(sorted(out.take()), sorted(want), "parallelism {p}");
    }
}

#[test]
fn sliding_count_windows_see_the_last_records() {
    let input = events(2000, 5, 12);
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    let out = env
        .from_collection(input.clone())
        .key_by(|e: &Ev| e.0)
        .count_window_sliding(5, 2)
        .aggregate_with(
            Sum,
            |k: &u32, _: &TimeWindow, s: i64, out: &mut Vec<(u32, i64)>| out.push((*k, s)),
        )
        .collect();
    env.execute().expect("job runs");
    let mut per_key: HashMap<u32, Vec<i64>> = HashMap::new();
    let mut want = Vec::new();
    for e in &input {
        let vs = per_key.entry(e.0).or_default();
        vs.push(e.2);
        if vs.len().is_multiple_of(2) {
            let from = vs.len().saturating_sub(5);
            want.push((e.0, vs[from..].iter().sum::<i64>()));
        }
    }
    assert_eq!(sorted(out.take()), sorted(want));
}

#[test]
fn count_trigger_replaces_event_time_firing() {
    let input = events(1500, 4, 13);
    let size = 100;
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    let out = env
        .from_collection(input.clone())
        .assign_timestamps_and_watermarks(
            WatermarkStrategy::<Ev>::monotonous_timestamps()
                .with_timestamp_assigner(|e, _| e.1)
                .per_record(),
        )
        // One timestamp subtask keeps every key's arrival order.
        .set_parallelism(1)
        .key_by(|e: &Ev| e.0)
        .window(WindowAssigner::tumbling(size))
        .trigger(CountTrigger(3))
        .aggregate_with(
            Sum,
            |k: &u32, w: &TimeWindow, s: i64, out: &mut Vec<(u32, i64, i64)>| {
                out.push((*k, w.start, s))
            },
        )
        .collect();
    env.execute().expect("job runs");
    // In-order timestamps: no record is late; each (key, window) fires on its
    // 3rd, 6th, ... record with the sum so far.
    let mut acc: HashMap<(u32, i64), (u64, i64)> = HashMap::new();
    let mut want = Vec::new();
    for e in &input {
        let start = e.1 - e.1.rem_euclid(size);
        let a = acc.entry((e.0, start)).or_default();
        a.0 += 1;
        a.1 += e.2;
        if a.0.is_multiple_of(3) {
            want.push((e.0, start, a.1));
        }
    }
    assert_eq!(sorted(out.take()), sorted(want));
}

#[test]
fn continuous_trigger_fires_at_intervals_and_at_the_end() {
    // One key, timestamps 0, 10, ..., 290; window [0, 300); fire every 100 ms.
    let input: Vec<Ev> = (0..30).map(|i| (1, i * 10, 1)).collect();
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(1);
    let out = env
        .from_collection(input)
        .assign_timestamps_and_watermarks(
            WatermarkStrategy::<Ev>::monotonous_timestamps()
                .with_timestamp_assigner(|e, _| e.1)
                .per_record(),
        )
        .key_by(|e: &Ev| e.0)
        .window(WindowAssigner::tumbling(300))
        .trigger(ContinuousEventTimeTrigger(100))
        .aggregate_with(
            Sum,
            |_: &u32, _: &TimeWindow, s: i64, out: &mut Vec<i64>| out.push(s),
        )
        .collect();
    env.execute().expect("job runs");
    // The watermark after a record is its timestamp - 1, emitted after it:
    // the timer at 100 fires after the record at 110 was added (12 records),
    // the one at 200 after 210 (22), and the window end at the final
    // watermark (30).
    assert_eq!(out.take(), vec![12, 22, 30]);
}

#[test]
fn evictors_trim_windows() {
    let mut recs: Vec<floe::Record<i64>> = (0..10)
        .map(|i| floe::Record::with_timestamp(i, i * 10))
        .collect();
    let w = TimeWindow::new(0, 100);
    floe::window::Evictor::evict_before(&TimeEvictor(25), &mut recs, &w);
    assert_eq!(
        recs.iter().map(|r| r.value).collect::<Vec<_>>(),
        vec![7, 8, 9]
    );
    floe::window::Evictor::evict_before(&CountEvictor(2), &mut recs, &w);
    assert_eq!(recs.iter().map(|r| r.value).collect::<Vec<_>>(), vec![8, 9]);
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

/// Emits its records once, then stays open until released.
struct Held {
    records: Vec<Ev>,
    release: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl floe::connectors::SourceFunction<Ev> for Held {
    fn poll_batch(
        &mut self,
        _: usize,
        out: &mut Vec<floe::Record<Ev>>,
    ) -> floe::Result<floe::connectors::SourcePoll> {
        use std::sync::atomic::Ordering;
        if !self.records.is_empty() {
            out.extend(self.records.drain(..).map(floe::Record::new));
            return Ok(floe::connectors::SourcePoll::Ready);
        }
        Ok(if self.release.load(Ordering::SeqCst) {
            floe::connectors::SourcePoll::Finished
        } else {
            floe::connectors::SourcePoll::Wait(std::time::Duration::from_millis(1))
        })
    }
}

#[derive(Clone)]
struct Report(std::sync::Arc<std::sync::Mutex<std::sync::mpsc::Sender<(u32, i64, i64)>>>);

impl floe::operators::sink::SinkFunction<(u32, i64, i64)> for Report {
    async fn write(&mut self, batch: floe::Batch<(u32, i64, i64)>) -> floe::Result<()> {
        for r in batch {
            let v = r.value;
            let _ = self.0.lock().expect("sender").send(v);
        }
        Ok(())
    }
}

#[test]
fn processing_time_windows_fire_when_the_clock_passes_their_end() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex, mpsc};
    // Records carry no timestamps: processing time (the clock) places them.
    let input = events(500, 5, 14);
    let now = floe::time::ManualClock::new(1_234);
    let release = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    let (recs, rel, clock) = (input.clone(), release.clone(), now.clone());
    env.add_source("held", move |_| {
        Ok(Held {
            records: recs.clone(),
            release: rel.clone(),
        })
    })
    .set_parallelism(1)
    .key_by(|e: &Ev| e.0)
    .window(WindowAssigner::tumbling_processing_time(1_000))
    .with_clock(clock)
    .aggregate_with(
        Sum,
        |k: &u32, w: &TimeWindow, s: i64, out: &mut Vec<(u32, i64, i64)>| {
            out.push((*k, w.start, s))
        },
    )
    .sink("Report", Report(Arc::new(Mutex::new(tx))));
    let handle = env.execute_async().expect("job starts");
    let mut want: HashMap<u32, i64> = HashMap::new();
    for e in &input {
        *want.entry(e.0).or_default() += e.2;
    }
    // Every record must have been placed (at clock 1234) before time moves on.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while handle
        .operator_metrics()
        .iter()
        .filter(|o| o.name == "Window")
        .map(|o| o.records_in)
        .sum::<u64>()
        < input.len() as u64
    {
        assert!(
            std::time::Instant::now() < deadline,
            "records reach the window"
        );
        std::thread::yield_now();
    }
    // Window [1000, 2000) closes once the clock passes 1999; ticks fire it.
    now.set(5_000);
    let mut got = Vec::new();
    for _ in 0..want.len() {
        got.push(
            rx.recv_timeout(std::time::Duration::from_secs(30))
                .expect("processing-time windows fire on the clock"),
        );
    }
    release.store(true, Ordering::SeqCst);
    futures::executor::block_on(handle.wait()).expect("job finishes");
    let want: Vec<(u32, i64, i64)> = want.into_iter().map(|(k, s)| (k, 1_000, s)).collect();
    assert_eq!(sorted(got), sorted(want));
}

#[test]
fn zero_count_windows_are_rejected() {
    for sliding in [false, true] {
        let env = StreamExecutionEnvironment::new();
        let keyed = env.from_collection(events(10, 2, 15)).key_by(|e: &Ev| e.0);
        let windowed = if sliding {
            keyed.count_window_sliding(0, 1)
        } else {
            keyed.count_window(0)
        };
        let _ = windowed
            .aggregate_with(
                Sum,
                |_: &u32, _: &TimeWindow, s: i64, out: &mut Vec<i64>| out.push(s),
            )
            .collect();
        let err = env
            .execute()
            .expect_err("a zero count is a configuration error");
        assert!(err.to_string().contains("at least 1"), "{err}");
    }
}
