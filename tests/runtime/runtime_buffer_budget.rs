//! The per-subtask buffer budget at high parallelism.
//!
//! A keyed job runs at a parallelism far above the machine's cores behind a
//! sink that busy-waits per batch (spinning on `Instant`, never sleeping), so
//! every channel fills to what flow control allows. Afterwards the most
//! records any one subtask ever held in its channels (input queues, partly
//! filled and queued output batches, counted per batch by the gate and the
//! writers) stays within `network_buffers × batch_size`, plus the one input
//! batch a step may push into the writers before backpressure is checked; and
//! the counts equal a plain map's. Without the budget each of the 16 input
//! channels takes 8 credits of full batches and each of the 16 output
//! channels a full batch plus a queue of 4: many times the budget.
//!
//! Then the `floe` binary runs the word count at parallelism 16 with a budget
//! that leaves each channel one credit and batches of a few dozen records,
//! under a throttled count (data stays in flight; nothing is timed), with
//! aligned and with unaligned checkpoints and an injected failure: the
//! checkpoints complete (no channel without credit holds a barrier back) and
//! the counts equal a HashMap's.

use crate::cli_common;
use cli_common::{run_ok as cli_ok, summary_field};
use floe::operators::sink::SinkFunction;
use floe::{JobResult, Record, StreamExecutionEnvironment};
use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const JOB_LIMIT: Duration = Duration::from_secs(120);

/// Runs the job; cancels it (failing the test) if it does not end within
/// [`JOB_LIMIT`].
fn run_ok(env: &StreamExecutionEnvironment) -> JobResult {
    let handle = env.execute_async().expect("job starts");
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let watchdog = {
        let handle = handle.clone();
        std::thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = done_rx.recv_timeout(JOB_LIMIT) {
                eprintln!("job did not finish within {JOB_LIMIT:?}; canceling it");
                handle.cancel();
            }
        })
    };
    let result = futures::executor::block_on(handle.wait());
    drop(done_tx);
    watchdog.join().expect("watchdog thread");
    result.unwrap_or_else(|e| panic!("job failed: {e}"))
}

/// What each sink subtask kept: the latest sum per key, and its update count.
type Kept = Arc<Mutex<Vec<(BTreeMap<u64, u64>, u64)>>>;

/// Spins for `spin` on every batch and keeps the latest sum per key.
#[derive(Clone)]
struct SlowSink {
    spin: Duration,
    latest: BTreeMap<u64, u64>,
    updates: u64,
    done: Kept,
}

impl SinkFunction<(u64, u64)> for SlowSink {
    async fn write(&mut self, batch: Vec<Record<(u64, u64)>>) -> floe::Result<()> {
        let start = Instant::now();
        while start.elapsed() < self.spin {
            std::hint::spin_loop();
        }
        for r in batch {
            let (k, s) = r.value;
            self.latest.insert(k, s);
            self.updates += 1;
        }
        Ok(())
    }

    async fn finish(&mut self) -> floe::Result<()> {
        let latest = std::mem::take(&mut self.latest);
        self.done.lock().unwrap().push((latest, self.updates));
        Ok(())
    }
}

#[test]
fn high_parallelism_keeps_buffered_records_within_the_budget() {
    const N: u64 = 100_000;
    const KEYS: u64 = 997;
    const P: usize = 16;
    const BATCH: usize = 64;
    const BUFFERS: usize = 32;
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(P)
        .set_arbiters(2)
        .set_batch_size(BATCH)
        .set_network_buffers(BUFFERS);
    let sink = SlowSink {
        spin: Duration::from_micros(20),
        latest: BTreeMap::new(),
        updates: 0,
        done: Arc::new(Mutex::new(Vec::new())),
    };
    env.from_generator(N, |i| (i % KEYS, i))
        .key_by_field(|t: &(u64, u64)| &t.0)
        .sum(|t: &mut (u64, u64)| &mut t.1)
        .sink("Sink", sink.clone());
    let result = run_ok(&env);

    let budget = env.config().runtime.buffer_budget();
    assert_eq!(budget, BUFFERS * BATCH);
    assert!(
        result.max_buffered_records >= 1,
        "records crossed a channel, so some were buffered"
    );
    assert!(
        result.max_buffered_records <= budget + BATCH,
        "a subtask held {} records in its channels; budget {budget} (+ one input batch of {BATCH})",
        result.max_buffered_records
    );
    assert!(
        result.max_input_queued_batches <= env.config().runtime.credits as usize,
        "an input channel held {} batches",
        result.max_input_queued_batches
    );

    let mut finals = BTreeMap::new();
    let mut updates = 0;
    for (latest, n) in std::mem::take(&mut *sink.done.lock().unwrap()) {
        updates += n;
        finals.extend(latest);
    }
    let mut expected = BTreeMap::new();
    for i in 0..N {
        *expected.entry(i % KEYS).or_insert(0) += i;
    }
    assert_eq!(updates, N, "one update per record");
    assert_eq!(finals, expected);
}

/// Runs the generated word count at parallelism 16 with two network buffers
/// per subtask (one credit per channel, batches of at most 12 records) and
/// `checkpointing` flags; checks checkpoints and counts.
fn wordcount_with_tiny_budget(checkpointing: &[&str]) {
    let dir = tempfile::tempdir().expect("temp dir");
    let output = dir.path().join("counts.txt");
    let (records, vocabulary, seed) = (40_000u64, 300usize, 11u64);
    let generator = floe::text::WordGenerator::new(vocabulary, seed);
    let mut oracle: HashMap<String, u64> = HashMap::new();
    for i in 0..records {
        *oracle.entry(generator.word(i)).or_insert(0) += 1;
    }
    let (records_s, vocabulary_s, seed_s) = (
        records.to_string(),
        vocabulary.to_string(),
        seed.to_string(),
    );
    let mut args = vec![
        "run",
        "wordcount",
        "--records",
        &records_s,
        "--vocabulary",
        &vocabulary_s,
        "--seed",
        &seed_s,
        "--parallelism",
        "16",
        "--network-buffers",
        "2",
        "--checkpoint-interval",
        "200",
        "--inject-failures",
        "1",
        "--count-rate",
        "10000",
        "--output",
        output.to_str().expect("UTF-8 temp path"),
    ];
    args.extend_from_slice(checkpointing);
    let stderr = cli_ok(&args);
    assert!(
        summary_field(&stderr, "checkpoints") >= 2,
        "fewer than 2 checkpoints completed:\n{stderr}"
    );
    assert!(
        summary_field(&stderr, "restarts") >= 1,
        "the injected failure did not restart the job:\n{stderr}"
    );
    let text = std::fs::read_to_string(&output).expect("read the output");
    let mut counts = HashMap::new();
    for line in text.lines() {
        let (word, count) = line.rsplit_once(',').expect("word,count");
        let count: u64 = count.parse().expect("a count");
        assert!(
            counts.insert(word.to_string(), count).is_none(),
            "{word} twice"
        );
    }
    assert_eq!(counts, oracle);
}

#[test]
fn aligned_checkpoints_complete_with_one_credit_per_channel() {
    wordcount_with_tiny_budget(&[]);
}

#[test]
fn unaligned_checkpoints_complete_with_one_credit_per_channel() {
    wordcount_with_tiny_budget(&["--unaligned"]);
}
