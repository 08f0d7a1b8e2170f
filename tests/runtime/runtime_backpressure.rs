//! Credit-based flow control under a slow consumer.
//!
//! A sink that busy-waits per batch (spinning on `Instant`, never sleeping) sits
//! behind a fast generator with small batches and few credits. After the job:
//! no input channel ever held more batches than its credits, no output channel
//! more than `runtime.output_queue_capacity` (plus, for an operator that
//! multiplies its input, what one input batch produces), the sender really was
//! held back (its queue filled), and the sink received every record (in order
//! where the topology keeps order). A rate-limited generator delivers every
//! record and takes at least as long as its rate allows.

use floe::operators::sink::SinkFunction;
use floe::{JobResult, Record, StreamExecutionEnvironment};
use std::collections::BTreeMap;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const JOB_LIMIT: Duration = Duration::from_secs(60);

/// Runs the job; cancels it (failing the test) if it does not end within
/// [`JOB_LIMIT`], aborts if even the cancel does not end it.
fn run_ok(env: &StreamExecutionEnvironment) -> JobResult {
    let handle = env.execute_async().expect("job starts");
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let watchdog = {
        let handle = handle.clone();
        std::thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = done_rx.recv_timeout(JOB_LIMIT) {
                eprintln!("job did not finish within {JOB_LIMIT:?}; canceling it");
                handle.cancel();
                if let Err(mpsc::RecvTimeoutError::Timeout) =
                    done_rx.recv_timeout(Duration::from_secs(10))
                {
                    std::process::abort();
                }
            }
        })
    };
    let result = futures::executor::block_on(handle.wait());
    drop(done_tx);
    watchdog.join().expect("watchdog thread");
    result.unwrap_or_else(|e| panic!("job failed: {e}"))
}

/// What each sink subtask received: its records in order and its batch count.
type Received<T> = Arc<Mutex<Vec<(Vec<T>, u64)>>>;

/// Spins for `spin` on every batch, then keeps its records; at the end of its
/// input hands them over (one vector per sink subtask, in arrival order).
#[derive(Clone)]
struct SlowSink<T> {
    spin: Duration,
    local: Vec<T>,
    batches: u64,
    done: Received<T>,
}

impl<T> SlowSink<T> {
    fn new(spin: Duration) -> Self {
        SlowSink {
            spin,
            local: Vec::new(),
            batches: 0,
            done: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// (records per subtask, batches per subtask)
    fn received(&self) -> Vec<(Vec<T>, u64)> {
        std::mem::take(&mut *self.done.lock().unwrap())
    }
}

fn spin_for(d: Duration) {
    let start = Instant::now();
    while start.elapsed() < d {
        std::hint::spin_loop();
    }
}

impl<T: Send + 'static> SinkFunction<T> for SlowSink<T> {
    async fn write(&mut self, batch: Vec<Record<T>>) -> floe::Result<()> {
        spin_for(self.spin);
        self.batches += 1;
        self.local.extend(batch.into_iter().map(|r| r.value));
        Ok(())
    }

    async fn finish(&mut self) -> floe::Result<()> {
        let records = std::mem::take(&mut self.local);
        self.done.lock().unwrap().push((records, self.batches));
        Ok(())
    }
}

fn env_with(parallelism: usize, batch_size: usize, credits: u32) -> StreamExecutionEnvironment {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(parallelism)
        .set_arbiters(2)
        .set_batch_size(batch_size)
        .set_credits(credits);
    env
}

fn assert_queues_bounded(result: &JobResult, env: &StreamExecutionEnvironment, extra: usize) {
    let runtime = env.config().runtime;
    assert!(
        result.max_input_queued_batches <= runtime.credits as usize,
        "an input channel held {} batches with {} credits",
        result.max_input_queued_batches,
        runtime.credits
    );
    assert!(
        result.max_output_queued_batches <= runtime.output_queue_capacity + extra,
        "an output channel held {} batches; capacity {} (+{extra})",
        result.max_output_queued_batches,
        runtime.output_queue_capacity
    );
    assert!(
        result.max_input_queued_batches >= 1,
        "records crossed a channel, so some batch was queued"
    );
    assert!(
        result.max_output_queued_batches >= 1,
        "the slow sink should have made the sender queue batches"
    );
}

#[test]
fn slow_sink_bounds_queues_single_channel() {
    const N: u64 = 30_000;
    for credits in [1u32, 2, 5] {
        let env = env_with(1, 16, credits);
        let sink = SlowSink::new(Duration::from_micros(20));
        env.from_generator(N, |i| i)
            .sink("Sink", sink.clone())
            .disable_chaining();
        let result = run_ok(&env);
        assert_queues_bounded(&result, &env, 0);
        let received = sink.received();
        assert_eq!(received.len(), 1, "one sink subtask");
        // One source, one channel: every record, in order.
        assert_eq!(
            received[0].0,
            (0..N).collect::<Vec<u64>>(),
            "credits {credits}"
        );
        assert!(received[0].1 >= N / 16, "full batches of 16 at most");
    }
}

#[test]
fn slow_sink_bounds_queues_with_rebalance_and_env_chaining_off() {
    const N: u64 = 30_000;
    let env = env_with(2, 16, 2);
    env.disable_operator_chaining();
    let sink = SlowSink::new(Duration::from_micros(20));
    env.from_generator(N, |i| i * 3)
        .map(|x| x + 1)
        .rebalance()
        .sink("Sink", sink.clone());
    let result = run_ok(&env);
    assert_queues_bounded(&result, &env, 0);
    let mut all: Vec<u64> = sink.received().into_iter().flat_map(|r| r.0).collect();
    all.sort_unstable();
    assert_eq!(all, (0..N).map(|i| i * 3 + 1).collect::<Vec<u64>>());
}

#[test]
fn slow_keyed_sink_gets_every_update() {
    const N: u64 = 20_000;
    let env = env_with(2, 16, 2);
    let sink = SlowSink::new(Duration::from_micros(20));
    env.from_generator(N, |i| (i % 37, i))
        .key_by_field(|t: &(u64, u64)| &t.0)
        .sum(|t: &mut (u64, u64)| &mut t.1)
        .sink("Sink", sink.clone());
    let result = run_ok(&env);
    // Key groups fill the channels unevenly: a timed flush of a partial batch
    // may add one batch to a full queue (see the test below).
    assert_queues_bounded(&result, &env, 1);
    let received = sink.received();
    let mut finals = BTreeMap::new();
    let mut updates = 0;
    for (records, _) in received {
        updates += records.len();
        for (k, s) in records {
            finals.insert(k, s);
        }
    }
    let mut expected = BTreeMap::new();
    for i in 0..N {
        *expected.entry(i % 37).or_insert(0) += i;
    }
    assert_eq!(updates as u64, N, "one update per record");
    assert_eq!(finals, expected);
}

#[test]
fn partial_batch_flushes_exceed_capacity_by_at_most_one() {
    // A filter makes the records per channel uneven, so a channel that just
    // reached its queue capacity may still hold a partly filled buffer; with a
    // zero buffer timeout that buffer is flushed at the end of the step (and a
    // buffer timeout flushes it the same way). Each channel receives at most
    // one full batch per source batch, so the queue stops at capacity before
    // that flush: capacity + 1 is the bound (the "plus what one input batch
    // produces" of `RuntimeConfig`).
    const N: u64 = 30_000;
    for (timeout, down) in [(Duration::ZERO, 3usize), (Duration::from_millis(2), 2)] {
        let env = env_with(1, 16, 2);
        env.set_buffer_timeout(timeout);
        let sink = SlowSink::new(Duration::from_micros(20));
        env.from_generator(N, |i| i)
            .filter(|x| x % 3 != 0)
            .rebalance()
            .sink("Sink", sink.clone())
            .set_parallelism(down);
        let result = run_ok(&env);
        assert_queues_bounded(&result, &env, 1);
        let mut all: Vec<u64> = sink.received().into_iter().flat_map(|r| r.0).collect();
        all.sort_unstable();
        assert_eq!(all, (0..N).filter(|x| x % 3 != 0).collect::<Vec<u64>>());
    }
}

#[test]
fn multiplying_operator_exceeds_capacity_by_at_most_one_input_batch() {
    const N: u64 = 4_000;
    const FACTOR: u64 = 10;
    let batch = 16;
    let env = env_with(1, batch, 2);
    let sink = SlowSink::new(Duration::from_micros(20));
    env.from_generator(N, |i| i)
        .flat_map(|x| (0..FACTOR).map(move |k| x * FACTOR + k))
        .sink("Sink", sink.clone())
        .disable_chaining();
    let result = run_ok(&env);
    // One input batch of 16 becomes 160 records: 10 more output batches.
    assert_queues_bounded(&result, &env, FACTOR as usize);
    let received = sink.received();
    assert_eq!(received[0].0, (0..N * FACTOR).collect::<Vec<u64>>());
}

#[test]
fn rate_limited_generator_delivers_everything() {
    const N: u64 = 3_000;
    const RATE: f64 = 30_000.0;
    for p in [1usize, 2] {
        let env = env_with(p, 64, 4);
        let out = env
            .from_generator_rate_limited(N, RATE, |i| i)
            .rebalance()
            .map(|x| x * 2)
            .collect();
        let result = run_ok(&env);
        let mut got = out.take();
        got.sort_unstable();
        assert_eq!(got, (0..N).map(|i| i * 2).collect::<Vec<u64>>(), "p={p}");
        // The limit holds: N records at RATE per second take at least N / RATE
        // (a little slack for float rounding of the budget).
        let floor = Duration::from_secs_f64(N as f64 / RATE * 0.9);
        assert!(
            result.elapsed >= floor,
            "p={p}: {N} records at {RATE}/s took only {:?}",
            result.elapsed
        );
    }
}
