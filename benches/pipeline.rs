//! Isolates whole-job throughput: the generated word count (keyBy + rolling
//! sum over owned `String` words from a 10,000-word vocabulary) of 1M records
//! at parallelism 1 and 2.
//!
//! Run: `cargo bench --bench pipeline`

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use floe::StreamExecutionEnvironment;
use floe::operators::sink::SinkFunction;
use floe::text::WordGenerator;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

const RECORDS: u64 = 1_000_000;

/// The largest count seen, kept per subtask and published once at the end
/// (no shared cache line per record).
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

fn wordcount(parallelism: usize, words: &Arc<WordGenerator>) -> u64 {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(parallelism);
    let top = Arc::new(AtomicU64::new(0));
    let g = words.clone();
    env.from_generator(RECORDS, move |i| (g.word(i), 1u64))
        .key_by_field(|t: &(String, u64)| &t.0)
        .sum(|t: &mut (String, u64)| &mut t.1)
        .sink("Last", Last(top.clone(), 0));
    env.execute().expect("bench job runs");
    top.load(Ordering::Relaxed)
}

fn bench(c: &mut Criterion) {
    let words = Arc::new(WordGenerator::new(10_000, 42));
    let mut g = c.benchmark_group("wordcount-1M");
    g.sample_size(10);
    g.throughput(Throughput::Elements(RECORDS));
    for p in [1usize, 2] {
        g.bench_with_input(BenchmarkId::from_parameter(format!("p{p}")), &p, |b, &p| {
            b.iter(|| wordcount(p, &words))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
