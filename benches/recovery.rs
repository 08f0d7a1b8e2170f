//! Isolates what a failure costs in time: from an injected subtask failure
//! to the restarted job processing records again (the manager's
//! `FailoverStats::max_recovery_ms`: cancel every subtask, wait for the
//! attempt's threads to stop, redeploy, restore the latest completed
//! checkpoint, first record emitted). Restart-all with
//! `RestartStrategy::FixedDelay { attempts: 1, delay: 0 }`, so the figure
//! holds no strategy delay, and one injected failure per job run (after
//! the first completed checkpoint). Two jobs at parallelism 2:
//!
//! - small: the generated word count (keyBy + rolling sum, 1,000 words),
//!   a few kilobytes of keyed state;
//! - large state: a keyed process function keeping a 64-byte
//!   `ValueState<Vec<u8>>` for each of 1M keys, about 100 MB of heap state,
//!   every key written before the first checkpoint (the source emits each
//!   key once, fast, then keeps updating them under a rate limit so that
//!   checkpoints hold the whole key space and records still flow after the
//!   restore).
//!
//! Each sample is one job run; the time reported is the recovery, not the
//! run (criterion's `iter_custom`). The resolution is a millisecond. Before
//! each group one untimed run prints its recovery and the size of the
//! checkpoint it restored.
//!
//! Run: `cargo bench --bench recovery`

use criterion::{Criterion, criterion_group, criterion_main};
use floe::StreamExecutionEnvironment;
use floe::failover::RestartStrategy;
use floe::operators::process::ProcessContext;
use floe::operators::sink::SinkFunction;
use floe::state::ValueStateDescriptor;
use floe::text::WordGenerator;
use std::sync::Arc;
use std::time::Duration;

const PARALLELISM: usize = 2;
const LARGE_KEYS: u64 = 1_000_000;
const VALUE_BYTES: usize = 64;

/// Drops everything.
#[derive(Clone)]
struct Discard;

impl<T: Send + 'static> SinkFunction<T> for Discard {
    async fn write(&mut self, _: floe::Batch<T>) -> floe::Result<()> {
        Ok(())
    }
}

/// An environment at parallelism 2 with checkpoints every `interval`, one
/// injected failure and a restart strategy that restarts once at once.
fn environment(interval: Duration, seed: u64) -> StreamExecutionEnvironment {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(PARALLELISM);
    env.enable_checkpointing(interval);
    let mut config = env.config();
    config.restart = Some(RestartStrategy::FixedDelay {
        attempts: 1,
        delay: Duration::ZERO,
    });
    let config = config.with_fault_injector(std::sync::Arc::new(floe::failover::FaultInjection {
        random_failures: 1,
        seed,
        faults: Vec::new(),
    }));
    env.set_config(config);
    env
}

/// Builds one job run's environment from an injection seed.
type Job = fn(u64) -> StreamExecutionEnvironment;

/// What one run measured.
struct Recovery {
    recovery: Duration,
    restored_state_bytes: u64,
}

fn run(env: StreamExecutionEnvironment) -> Recovery {
    let handle = env.execute_async().expect("job starts");
    futures::executor::block_on(handle.wait()).expect("job finishes after one restart");
    let failover = handle.failover_stats();
    assert_eq!(failover.restarts, 1, "{failover:?}");
    let restored = failover.restored_checkpoints.first().copied().flatten();
    let restored_state_bytes = handle
        .checkpoint_stats()
        .history
        .iter()
        .find(|c| Some(c.id) == restored)
        .map(|c| c.state_bytes)
        .unwrap_or(0);
    Recovery {
        recovery: Duration::from_millis(failover.max_recovery_ms),
        restored_state_bytes,
    }
}

/// The word count: 3M generated words (1,000-word vocabulary), keyed sum.
fn small_job(seed: u64) -> StreamExecutionEnvironment {
    let env = environment(Duration::from_millis(50), seed);
    let words = Arc::new(WordGenerator::new(1_000, 42));
    env.from_generator(3_000_000, move |i| (words.word(i), 1u64))
        .key_by_field(|t: &(String, u64)| &t.0)
        .sum(|t: &mut (String, u64)| &mut t.1)
        .sink("Discard", Discard);
    env
}

/// 1M keys with a 64-byte value each: the first `LARGE_KEYS` records write
/// every key; 2M more update them at a limited rate, so the job is still
/// running after the checkpoint that holds every key, and after the
/// restore.
fn large_state_job(seed: u64) -> StreamExecutionEnvironment {
    let env = environment(Duration::from_millis(1_000), seed);
    let value = ValueStateDescriptor::<Vec<u8>>::new("value");
    env.from_generator_rate_limited(3 * LARGE_KEYS, 1_500_000.0, |i| i % LARGE_KEYS)
        .key_by(|k: &u64| *k)
        .process(
            move |k: u64, ctx: &mut ProcessContext<'_, '_, u64, u64>| -> floe::Result<()> {
                let mut state = ctx.value_state(&value)?;
                let mut v = state.value()?.unwrap_or_else(|| vec![0u8; VALUE_BYTES]);
                v[(k as usize) % VALUE_BYTES] = v[(k as usize) % VALUE_BYTES].wrapping_add(1);
                state.update(v)?;
                Ok(())
            },
        )
        .sink("Discard", Discard);
    env
}

fn bench(c: &mut Criterion) {
    let jobs: [(&str, Job); 2] = [
        ("small", small_job),
        ("large_state_1M_keys", large_state_job),
    ];
    let mut g = c.benchmark_group("recovery");
    g.sample_size(10);
    g.warm_up_time(Duration::from_millis(1));
    for (name, job) in jobs {
        let probe = run(job(1));
        eprintln!(
            "recovery/{name}: one run recovered in {} ms, restoring {:.1} KB of checkpointed state",
            probe.recovery.as_millis(),
            probe.restored_state_bytes as f64 / 1e3
        );
        let mut seed = 1;
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        seed += 1;
                        run(job(seed)).recovery
                    })
                    .sum()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
