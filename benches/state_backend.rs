//! Isolates keyed-state access: `ValueState<u64>` get and put per second on
//! the heap and the redb backend, each holding 1M keys (u64), with random keys
//! (seeded) over the whole key space. Each iteration does 100,000 operations.
//!
//! Run: `cargo bench --bench state_backend`

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use floe::state::{
    HeapStateBackend, KeyScope, RedbStateBackend, StateBackend, ValueStateDescriptor,
};
use std::hint::black_box;

const KEYS: u64 = 1_000_000;
const OPS: u64 = 100_000;
const MAXP: u32 = 128;

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
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

criterion_group!(benches, bench);
criterion_main!(benches);
