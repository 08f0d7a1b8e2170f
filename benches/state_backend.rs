//! Isolates keyed-state access: `ValueState<u64>` get and put per second on
//! the heap and the redb backend, each holding 1M keys (u64), with random keys
//! (seeded) over the whole key space. Each iteration does 100,000 operations.
//!
//! Also, side by side:
//! - the incremental checkpoint size: the redb backend's full snapshot of
//!   1M keys, then the snapshot after changing 1% of them (a delta against
//!   the completed full one), both sizes and their ratio printed;
//! - the word count (a keyed process function counting in a
//!   `ValueState<u64>`, 1M generated words of a 10,000-word vocabulary, P=2)
//!   on each backend, and the redb/heap throughput ratio printed.
//!
//! Nothing is asserted: the figures go to `docs/benchmarks.md`.
//!
//! Run: `cargo bench --bench state_backend`

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use floe::StreamExecutionEnvironment;
use floe::checkpoint::CheckpointId;
use floe::operators::process::ProcessContext;
use floe::operators::sink::SinkFunction;
use floe::state::{
    HeapStateBackend, KeyGroupBytes, KeyScope, RedbStateBackend, StateBackend, StateBackendKind,
    ValueStateDescriptor,
};
use floe::text::WordGenerator;
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

const KEYS: u64 = 1_000_000;
const OPS: u64 = 100_000;
const MAXP: u32 = 128;

/// A random key for operation `seed`: splitmix64's first output from it.
fn mix(seed: u64) -> u64 {
    floe::text::SplitMix(seed).next()
}

fn prefill(b: &mut dyn StateBackend<u64>, desc: &ValueStateDescriptor<u64>) {
    for k in 0..KEYS {
        KeyScope::new(b, &k)
            .value_state(desc)
            .and_then(|mut s| s.update(k))
            .expect("prefill");
    }
}

fn bench(c: &mut Criterion) {
    let desc = ValueStateDescriptor::<u64>::new("v");
    let mut heap = HeapStateBackend::<u64>::new("bench", MAXP, 0..MAXP);
    let mut redb = RedbStateBackend::<u64>::temp("bench", MAXP, 0..MAXP).expect("redb file");
    let backends: [(&str, &mut dyn StateBackend<u64>); 2] =
        [("heap", &mut heap), ("redb", &mut redb)];
    let mut g = c.benchmark_group("value-state-1M-keys");
    g.sample_size(10);
    g.throughput(Throughput::Elements(OPS));
    for (name, b) in backends {
        prefill(b, &desc);
        let mut seed = 1u64;
        g.bench_function(BenchmarkId::new("get", name), |bench| {
            bench.iter(|| {
                let mut sum = 0u64;
                for _ in 0..OPS {
                    seed += 1;
                    let k = mix(seed) % KEYS;
                    let v = KeyScope::new(&mut *b, &k)
                        .value_state(&desc)
                        .and_then(|mut s| s.value())
                        .expect("get");
                    sum = sum.wrapping_add(v.unwrap_or(0));
                }
                black_box(sum)
            })
        });
        g.bench_function(BenchmarkId::new("put", name), |bench| {
            bench.iter(|| {
                for _ in 0..OPS {
                    seed += 1;
                    let k = mix(seed) % KEYS;
                    KeyScope::new(&mut *b, &k)
                        .value_state(&desc)
                        .and_then(|mut s| s.update(seed))
                        .expect("put");
                }
            })
        });
    }
    g.finish();
}

fn size(groups: &[KeyGroupBytes]) -> usize {
    groups.iter().map(|g| g.bytes.len()).sum()
}

/// Full snapshot of 1M keys, then a delta after changing 1% of them.
fn incremental_size(c: &mut Criterion) {
    let desc = ValueStateDescriptor::<u64>::new("v");
    let mut b = RedbStateBackend::<u64>::temp("bench", MAXP, 0..MAXP).expect("redb file");
    prefill(&mut b, &desc);
    let full = b
        .snapshot_for(CheckpointId(1), false)
        .serialize()
        .expect("full snapshot");
    b.notify_checkpoint_complete(CheckpointId(1));
    let mut seed = 7u64;
    for _ in 0..KEYS / 100 {
        seed += 1;
        let k = mix(seed) % KEYS;
        KeyScope::new(&mut b, &k)
            .value_state(&desc)
            .and_then(|mut s| s.update(seed))
            .expect("put");
    }
    let snapshot = b.snapshot_for(CheckpointId(2), false);
    let incremental = snapshot.base().is_some();
    let delta = snapshot.serialize().expect("delta snapshot");
    let (f, d) = (size(&full), size(&delta));
    println!(
        "incremental-checkpoint-1M-keys: full={f} bytes, after changing 1%: {d} bytes \
         (incremental={incremental}), ratio={:.4}",
        d as f64 / f as f64
    );
    // Time the synchronous and asynchronous parts of a delta of 1%.
    let mut checkpoint = 2u64;
    let mut g = c.benchmark_group("incremental-checkpoint-1M-keys");
    g.sample_size(10);
    g.bench_function("1pct-delta", |bench| {
        bench.iter(|| {
            b.notify_checkpoint_complete(CheckpointId(checkpoint));
            checkpoint += 1;
            for _ in 0..KEYS / 100 {
                seed += 1;
                let k = mix(seed) % KEYS;
                KeyScope::new(&mut b, &k)
                    .value_state(&desc)
                    .and_then(|mut s| s.update(seed))
                    .expect("put");
            }
            black_box(size(
                &b.snapshot_for(CheckpointId(checkpoint), false)
                    .serialize()
                    .expect("snapshot"),
            ))
        })
    });
    g.finish();
}

const WORDS: u64 = 1_000_000;

/// The largest count seen, published once at the end.
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

/// The word count of `floe run wordcount --state`, at P=2.
fn wordcount(kind: StateBackendKind, words: &Arc<WordGenerator>) -> u64 {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    let top = Arc::new(AtomicU64::new(0));
    let g = words.clone();
    let count = ValueStateDescriptor::<u64>::new("count");
    let function = move |(word, n): (String, u64),
                         ctx: &mut ProcessContext<'_, '_, (String, u64), String>|
          -> floe::Result<()> {
        let mut state = ctx.value_state(&count)?;
        let total = state.value()?.unwrap_or(0) + n;
        state.update(total)?;
        ctx.collect((word, total));
        Ok(())
    };
    env.from_generator(WORDS, move |i| (g.word(i), 1u64))
        .key_by_field(|t: &(String, u64)| &t.0)
        .process_with_backend(function, kind)
        .sink("Last", Last(top.clone(), 0));
    env.execute().expect("bench job runs");
    top.load(Ordering::Relaxed)
}

fn wordcount_ratio(c: &mut Criterion) {
    let words = Arc::new(WordGenerator::new(10_000, 42));
    let kinds = [
        ("heap", StateBackendKind::Heap),
        ("redb", StateBackendKind::Redb { dir: None }),
    ];
    // One timed run each, interleaved three times, for the printed ratio.
    let mut best = [f64::MAX; 2];
    for _ in 0..3 {
        for (i, (_, kind)) in kinds.iter().enumerate() {
            let t = Instant::now();
            black_box(wordcount(kind.clone(), &words));
            best[i] = best[i].min(t.elapsed().as_secs_f64());
        }
    }
    let rps = |s: f64| WORDS as f64 / s;
    println!(
        "wordcount-1M-state: heap={:.0} records/s, redb={:.0} records/s, redb/heap={:.2}",
        rps(best[0]),
        rps(best[1]),
        best[0] / best[1]
    );
    let mut g = c.benchmark_group("wordcount-1M-state");
    g.sample_size(10);
    g.throughput(Throughput::Elements(WORDS));
    for (name, kind) in kinds {
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| wordcount(kind.clone(), &words))
        });
    }
    g.finish();
}

criterion_group!(benches, bench, incremental_size, wordcount_ratio);
criterion_main!(benches);
