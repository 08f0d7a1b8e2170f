//! Sliding windows fire a watermark's windows a bounded part at a time, and
//! the watermark follows their output.
//!
//! - `one_watermark_over_many_windows_fires_in_parts_before_the_watermark`:
//!   5,000 records with distinct keys, 1 ms apart, in sliding windows of
//!   1 s every 10 ms, so the final watermark passes 500 windows holding
//!   500,000 (key, window) results at once. An operator chained after the
//!   window sees every result (their count and total equal a brute-force
//!   count over the records), none of them behind its watermark (the
//!   watermark is held until the last part is out), and no batch larger
//!   than one part (4,096 records rounded up to a whole window of at most
//!   1,000 keys) instead of one batch of all of them.

use floe::operators::{Operator, Output};
use floe::time::WatermarkStrategy;
use floe::window::{Sum, TimeWindow, WindowAssigner};
use floe::{Batch, StreamExecutionEnvironment};
use std::sync::{Arc, Mutex};

type Ev = (u32, i64, i64);

/// What the operator after the window saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Seen {
    results: u64,
    total: i64,
    behind_watermark: u64,
    largest_batch: usize,
}

#[derive(Clone)]
struct Check {
    watermark: i64,
    seen: Arc<Mutex<Seen>>,
}

impl Operator<(u32, i64), ()> for Check {
    fn process_batch(
        &mut self,
        batch: Batch<(u32, i64)>,
        _: &mut Output<'_, ()>,
    ) -> floe::Result<()> {
        let mut seen = self.seen.lock().expect("not poisoned");
        seen.largest_batch = seen.largest_batch.max(batch.len());
        for r in batch {
            seen.results += 1;
            seen.total += r.value.1;
            if r.timestamp.is_some_and(|t| t <= self.watermark) {
                seen.behind_watermark += 1;
            }
        }
        Ok(())
    }

    fn on_watermark(&mut self, watermark: i64, _: &mut Output<'_, ()>) -> floe::Result<()> {
        self.watermark = watermark;
        Ok(())
    }
}

#[test]
fn one_watermark_over_many_windows_fires_in_parts_before_the_watermark() {
    const N: i64 = 5_000;
    const SIZE: i64 = 1_000;
    const SLIDE: i64 = 10;
    let records: Vec<Ev> = (0..N).map(|i| (i as u32, i, i % 7 + 1)).collect();
    // Brute force: each record is in every window [s, s + SIZE) with
    // s ≡ 0 (mod SLIDE) and s <= ts < s + SIZE; its key is its own.
    let mut want = Seen::default();
    for &(_, ts, value) in &records {
        let mut s = ts - ts.rem_euclid(SLIDE);
        while s + SIZE > ts {
            want.results += 1;
            want.total += value;
            s -= SLIDE;
        }
    }
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(1);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let check = Check {
        watermark: i64::MIN,
        seen: seen.clone(),
    };
    env.from_collection(records)
        .assign_timestamps_and_watermarks(
            WatermarkStrategy::<Ev>::bounded_out_of_orderness(0)
                .with_timestamp_assigner(|e, _| e.1),
        )
        .key_by_field(|e: &Ev| &e.0)
        .window(WindowAssigner::sliding(SIZE, SLIDE))
        .aggregate_with(
            Sum::of(|e: &Ev| e.2),
            |k: &u32, _: &TimeWindow, sum: i64, out: &mut Vec<(u32, i64)>| out.push((*k, sum)),
        )
        .transform("Check", move |_| check.clone());
    env.execute().expect("job runs");
    let seen = *seen.lock().expect("not poisoned");
    assert_eq!(seen.results, want.results);
    assert_eq!(seen.total, want.total);
    assert_eq!(
        seen.behind_watermark, 0,
        "results arrived after their watermark"
    );
    assert!(
        seen.largest_batch <= 4_096 + SIZE as usize,
        "a batch of {} results: firings were not split",
        seen.largest_batch
    );
}
