//! Isolates what periodic checkpoints cost a running job: the same job with
//! checkpointing off, enabled with an interval that never fires during the
//! job (the fixed cost: the store, the barrier handlers), and with
//! exactly-once aligned checkpoints (heap state, checkpoint directory in a
//! temporary directory) every 100 ms, side by side in one run. Two jobs at
//! parallelism 2: the generated word count of `benches/pipeline.rs` (keyBy +
//! rolling sum, 10,000-word vocabulary) over 4M records, and a keyed 1 s
//! tumbling event-time window sum over 4M generated `(key, ts, value)`
//! events (1,000 keys). Before each group one untimed checkpointed run
//! prints how many checkpoints it completed and the longest one's
//! trigger-to-completion time. Criterion runs the modes one after another,
//! not interleaved: on a noisy machine compare them over several runs.
//!
//! The interval is 100 ms, not the 1 s of the CLI measurements in
//! `docs/benchmarks.md`, so that each iteration (~0.3–1 s) holds several
//! checkpoints.
//!
//! Run: `cargo bench --bench checkpoint`

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use floe::StreamExecutionEnvironment;
use floe::checkpoint::CheckpointConfig;
use floe::operators::sink::SinkFunction;
use floe::text::WordGenerator;
use floe::time::WatermarkStrategy;
use floe::window::WindowAssigner;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const RECORDS: u64 = 4_000_000;
const PARALLELISM: usize = 2;
const INTERVAL: Duration = Duration::from_millis(100);
const KEYS: u64 = 1_000;
/// Event-time rate per source subtask: 40 windows of 1 s per run.
const EVENTS_PER_SECOND: u64 = 50_000;
const BASE_TS: i64 = 1_700_000_000_000;

/// The largest value seen, kept per subtask and published once at the end.
#[derive(Clone)]
struct Last(Arc<AtomicU64>, u64);

impl SinkFunction<(String, u64)> for Last {
    async fn write(&mut self, batch: floe::Batch<(String, u64)>) -> floe::Result<()> {
        for r in batch {
            let v = r.value;
            self.1 = self.1.max(v.1);
        }
        Ok(())
    }

    async fn finish(&mut self) -> floe::Result<()> {
        self.0.fetch_max(self.1, Ordering::Relaxed);
        Ok(())
    }
}

/// The sum of the window results, kept per subtask and published at the end.
#[derive(Clone)]
struct Total(Arc<AtomicU64>, u64);

impl SinkFunction<(u64, i64, i64)> for Total {
    async fn write(&mut self, batch: floe::Batch<(u64, i64, i64)>) -> floe::Result<()> {
        for r in batch {
            let v = r.value;
            self.1 = self.1.wrapping_add(v.2 as u64);
        }
        Ok(())
    }

    async fn finish(&mut self) -> floe::Result<()> {
        self.0.fetch_add(self.1, Ordering::Relaxed);
        Ok(())
    }
}

/// An environment at `PARALLELISM`, checkpointing every `interval` into
/// `dir` when given.
fn environment(dir: Checkpointing) -> StreamExecutionEnvironment {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(PARALLELISM);
    if let Some((dir, interval)) = dir {
        env.set_checkpoint_config(CheckpointConfig::every(interval).with_dir(dir.path()));
    }
    env
}

/// Runs the job and returns the checkpoints it completed and the longest.
fn run(env: StreamExecutionEnvironment) -> (u64, u64) {
    let handle = env.execute_async().expect("bench job starts");
    futures::executor::block_on(handle.wait()).expect("bench job runs");
    let stats = handle.checkpoint_stats();
    (stats.completed, stats.max_duration_ms)
}

fn wordcount(words: &Arc<WordGenerator>, dir: Checkpointing) -> (u64, u64) {
    let env = environment(dir);
    let top = Arc::new(AtomicU64::new(0));
    let g = words.clone();
    env.from_generator(RECORDS, move |i| (g.word(i), 1u64))
        .key_by_field(|t: &(String, u64)| &t.0)
        .sum(|t: &mut (String, u64)| &mut t.1)
        .sink("Last", Last(top.clone(), 0));
    run(env)
}

fn window(dir: Checkpointing) -> (u64, u64) {
    type E = (u64, i64, i64);
    let env = environment(dir);
    let total = Arc::new(AtomicU64::new(0));
    // The generator gives each source subtask a contiguous range of `i`, so
    // event time follows the position within that range: both subtasks
    // advance through event time together.
    let share = RECORDS / PARALLELISM as u64;
    env.from_generator(RECORDS, move |i| {
        let local = i % share;
        let ts = BASE_TS + (local * 1000 / EVENTS_PER_SECOND) as i64;
        (floe::text::mix64(i) % KEYS, ts, (i % 100 + 1) as i64)
    })
    .assign_timestamps_and_watermarks(
        WatermarkStrategy::<E>::monotonous_timestamps().with_timestamp_assigner(|e, _| e.1),
    )
    .key_by_field(|e: &E| &e.0)
    .window(WindowAssigner::tumbling(1_000))
    .reduce(|a: E, b: E| (a.0, a.1, a.2 + b.2))
    .sink("Total", Total(total.clone(), 0));
    run(env)
}

/// The benchmarked settings: none, an interval longer than any run, 100 ms.
const MODES: [(&str, Option<Duration>); 3] = [
    ("off", None),
    ("enabled-never-fires", Some(Duration::from_secs(3600))),
    ("aligned-100ms", Some(INTERVAL)),
];

/// Where and how often a job checkpoints; `None`: it does not.
type Checkpointing<'a> = Option<(&'a tempfile::TempDir, Duration)>;

/// Runs `job` once per iteration in each mode, with a fresh checkpoint
/// directory when checkpointing is enabled.
fn group(c: &mut Criterion, name: &str, job: &dyn Fn(Checkpointing) -> (u64, u64)) {
    let dir = tempfile::tempdir().expect("temp dir");
    let (n, max_ms) = job(Some((&dir, INTERVAL)));
    eprintln!("{name}, aligned every 100 ms: checkpoints={n} max_checkpoint_ms={max_ms}");
    let mut g = c.benchmark_group(name);
    g.sample_size(10);
    g.throughput(Throughput::Elements(RECORDS));
    for (mode, interval) in MODES {
        g.bench_function(BenchmarkId::from_parameter(mode), |b| {
            b.iter(|| {
                let dir = interval.map(|_| tempfile::tempdir().expect("temp dir"));
                job(dir.as_ref().zip(interval))
            })
        });
    }
    g.finish();
}

fn bench(c: &mut Criterion) {
    let words = Arc::new(WordGenerator::new(10_000, 42));
    group(c, "checkpoint-wordcount-4M-p2", &|dir| {
        wordcount(&words, dir)
    });
    group(c, "checkpoint-window-tumbling-4M-p2", &window);
}

criterion_group!(benches, bench);
criterion_main!(benches);
