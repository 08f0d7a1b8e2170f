//! A flat_map whose one input record explodes into many records stays
//! bounded by the channels' credits.
//!
//! The bug: a flat_map collected every output of a record before sending
//! any, and the writer queued them all, so a single 50 MB line split into
//! words peaked at over 1 GB. Now the flat_map emits a step at a time and
//! suspends in the middle of the record while its output has no room; the
//! subtask resumes it when credit returns.
//!
//! The oracle on the bound: the flat_map's iterator counts the records it
//! produced, the sink the records it received; at every record the sink
//! sees, the difference (what is buffered in between) must stay within what
//! the channel and the flat_map's step can hold, far below the record's
//! output. The output must be exact (every record, in order). Nothing is
//! timed: the bound is a count.

use floe::StreamExecutionEnvironment;
use floe::operators::basic::FLAT_MAP_STEP;
use floe::operators::sink::SinkFunction;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

const PER_RECORD: u64 = 200_000;
const BATCH: usize = 256;
const CREDITS: u32 = 2;

/// Checks each record's order and how far the producer got ahead.
#[derive(Clone)]
struct GapSink {
    produced: Arc<AtomicU64>,
    received: Arc<AtomicU64>,
    max_gap: Arc<AtomicU64>,
    next: u64,
}

impl SinkFunction<u64> for GapSink {
    async fn write(&mut self, batch: floe::Batch<u64>) -> floe::Result<()> {
        for r in batch {
            let value = r.value;
            assert_eq!(value, self.next, "records out of order or lost");
            self.next += 1;
            let received = self.received.fetch_add(1, Ordering::Relaxed) + 1;
            let gap = self.produced.load(Ordering::Relaxed) - received;
            self.max_gap.fetch_max(gap, Ordering::Relaxed);
        }
        Ok(())
    }
}

#[test]
fn exploding_record_is_emitted_under_backpressure() {
    exploding_record(true);
}

/// Right after its source, where chaining would put it into the source's
/// chain (whose position is taken between steps): it is kept out of it, so
/// it suspends there too.
#[test]
fn exploding_record_right_after_its_source_is_emitted_under_backpressure() {
    exploding_record(false);
}

fn exploding_record(edge_before: bool) {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(1);
    env.set_batch_size(BATCH);
    env.set_credits(CREDITS);
    let produced = Arc::new(AtomicU64::new(0));
    let received = Arc::new(AtomicU64::new(0));
    let max_gap = Arc::new(AtomicU64::new(0));
    let counter = produced.clone();
    let source = env.from_collection(vec![PER_RECORD]);
    let input = if edge_before {
        source.rebalance()
    } else {
        source
    };
    // A network edge after the flat_map: its output waits for credit.
    input
        .flat_map(move |n: u64| {
            let counter = counter.clone();
            (0..n).inspect(move |_| {
                counter.fetch_add(1, Ordering::Relaxed);
            })
        })
        .rebalance()
        .sink(
            "GapSink",
            GapSink {
                produced: produced.clone(),
                received: received.clone(),
                max_gap: max_gap.clone(),
                next: 0,
            },
        )
        .set_input_rate(400_000.0);
    env.execute().expect("job runs");
    assert_eq!(received.load(Ordering::Relaxed), PER_RECORD);
    // In flight at most: the sink's credits, the writer's output queue and
    // the batch being filled, one flat_map step, and the sink's batch.
    let queue = floe::Config::default().runtime.output_queue_capacity as u64;
    let bound = (CREDITS as u64 + queue + 2) * BATCH as u64 + FLAT_MAP_STEP as u64;
    let gap = max_gap.load(Ordering::Relaxed);
    assert!(
        gap <= bound,
        "{gap} records buffered between the flat_map and the sink (bound {bound})"
    );
}
