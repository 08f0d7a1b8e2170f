//! Faults at given points (a record count, a checkpoint's snapshot or its
//! asynchronous write, a restore) restart
//! the job from its latest checkpoint; the committed output of a
//! two-phase-commit sink stays exactly the output of a run without faults.

use crate::gated;
use floe::StreamExecutionEnvironment;
use floe::checkpoint::CheckpointConfig;
use floe::connectors::transactional_file::TransactionalFileSink;
use floe::failover::{Fault, FaultInjection, FaultPoint, RestartStrategy};
use gated::{Gate, gated_generator};
use std::collections::BTreeMap;
use std::time::Duration;

const RECORDS: u64 = 20_000;
const KEYS: u64 = 50;

/// The rolling counts a keyed sum emits: for each key, 1..=n once each.
fn oracle() -> BTreeMap<String, usize> {
    let mut n: BTreeMap<u64, u64> = BTreeMap::new();
    for i in 0..RECORDS {
        *n.entry(floe::text::mix64(i) % KEYS).or_insert(0) += 1;
    }
    let mut out = BTreeMap::new();
    for (k, count) in n {
        for c in 1..=count {
            *out.entry(format!("{k},{c}")).or_insert(0) += 1;
        }
    }
    out
}

/// Runs the keyed count with `faults` and a restart strategy of five
/// attempts, its generator gated (see `gated`): each attempt's sources hold
/// after 5% of their slice until `drive` opens the gate, so the faults a
/// test wants first fire while the sources hold (checkpoints go on), and
/// the others only after: their order does not depend on the machine's
/// speed.
fn run(
    faults: Vec<Fault>,
    dir: &std::path::Path,
    drive: impl FnOnce(&floe::JobHandle, &Gate),
) -> (floe::api::FailoverStats, BTreeMap<String, usize>) {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    env.set_batch_size(64);
    let mut config = env.config();
    config.checkpoint = CheckpointConfig::every(Duration::from_millis(20)).with_dir(dir.join("ck"));
    config.restart = Some(RestartStrategy::FixedDelay {
        attempts: 5,
        delay: Duration::ZERO,
    });
    let config = config.with_fault_injector(std::sync::Arc::new(FaultInjection {
        faults,
        ..Default::default()
    }));
    env.set_config(config);
    let out = dir.join("out.txt");
    let gate = Gate::new();
    gated_generator(&env, &gate, RECORDS, &[0.05], |i| {
        (floe::text::mix64(i) % KEYS, 1u64)
    })
    .key_by(|t: &(u64, u64)| t.0)
    .sum(|t: &mut (u64, u64)| &mut t.1)
    .map(|(k, c): (u64, u64)| format!("{k},{c}"))
    .sink_exactly_once(
        "TransactionalFileSink",
        TransactionalFileSink::new(&out).unwrap(),
    );
    let handle = env.execute_async().unwrap();
    drive(&handle, &gate);
    gate.open();
    futures::executor::block_on(handle.wait()).expect("the job recovers and finishes");
    let mut lines = BTreeMap::new();
    for l in std::fs::read_to_string(&out).unwrap().lines() {
        *lines.entry(l.to_string()).or_insert(0) += 1;
    }
    (handle.failover_stats(), lines)
}

/// Waits until the job restarted `n` times.
fn wait_for_restarts(handle: &floe::JobHandle, n: u64) {
    assert!(
        futures::executor::block_on(handle.wait_for_restarts(n)),
        "the job ended before {n} restarts"
    );
}

#[test]
fn faults_at_a_record_count_and_during_a_snapshot_keep_the_output_exact() {
    let dir = tempfile::tempdir().unwrap();
    let faults = vec![
        Fault {
            operator: "Keyed Sum".into(),
            subtask: 0,
            at: FaultPoint::Records(3_000),
        },
        Fault {
            operator: "Keyed Sum".into(),
            subtask: 1,
            at: FaultPoint::Checkpoint(floe::CheckpointId(3)),
        },
    ];
    // The snapshot fault fires while the sources hold (short of 3,000
    // records into either subtask); the record-count one after.
    let (stats, lines) = run(faults, dir.path(), |handle, _| wait_for_restarts(handle, 1));
    assert_eq!(stats.restarts, 2, "both faults fired once: {stats:?}");
    assert!(
        lines == oracle(),
        "committed output differs from the fault-free output"
    );
}

#[test]
fn without_faults_the_output_is_the_oracle() {
    let dir = tempfile::tempdir().unwrap();
    let (stats, lines) = run(Vec::new(), dir.path(), |handle, gate| {
        gate.wait_held(2);
        gated::wait_for_new_checkpoints(handle, 2);
    });
    assert_eq!(stats.restarts, 0);
    assert!(lines == oracle());
}

#[test]
fn faults_while_writing_a_checkpoint_and_while_restoring_keep_the_output_exact() {
    let dir = tempfile::tempdir().unwrap();
    let faults = vec![
        // Once the sources read on: a failure at a record count.
        Fault {
            operator: "Keyed Sum".into(),
            subtask: 0,
            at: FaultPoint::Records(3_000),
        },
        // The restart of the next fault fails while restoring: restored
        // again.
        Fault {
            operator: "Keyed Sum".into(),
            subtask: 1,
            at: FaultPoint::Restore,
        },
        // First, while the sources hold: a checkpoint whose asynchronous
        // part fails is declined, never used, and (no failed checkpoint
        // tolerated) restarts the job.
        Fault {
            operator: "Keyed Sum".into(),
            subtask: 0,
            at: FaultPoint::AsyncWrite(floe::CheckpointId(6)),
        },
    ];
    let (stats, lines) = run(faults, dir.path(), |handle, _| wait_for_restarts(handle, 2));
    assert_eq!(stats.restarts, 3, "every fault fired once: {stats:?}");
    assert!(
        stats
            .restored_checkpoints
            .iter()
            .all(|&c| c != Some(floe::CheckpointId(6))),
        "the checkpoint whose write failed was restored: {stats:?}"
    );
    assert!(
        lines == oracle(),
        "committed output differs from the fault-free output"
    );
}

/// Runs a forward-only job (each subtask pair its own pipelined region)
/// whose first `Double` subtask fails once, restarted after a delay under
/// `failover`; asserts the recovery time (`max_recovery_ms`: from the
/// failure to the restarted subtasks' first records, recorded when they
/// first emit) is at least the delay and at most the run's wall time.
fn assert_recovery_time_recorded(failover: floe::failover::FailoverStrategy) {
    const DELAY: Duration = Duration::from_millis(40);
    const N: u64 = 4_000;
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    let mut config = env.config();
    config.failover = failover;
    config.restart = Some(RestartStrategy::FixedDelay {
        attempts: 1,
        delay: DELAY,
    });
    let config = config.with_fault_injector(std::sync::Arc::new(FaultInjection {
        faults: vec![Fault {
            operator: "Double".into(),
            subtask: 0,
            at: FaultPoint::Records(500),
        }],
        ..Default::default()
    }));
    env.set_config(config);
    let collected = env
        .from_generator(N, |i| i)
        .map(|i: u64| i * 2)
        .name("Double")
        .collect();
    let started = std::time::Instant::now();
    let handle = env.execute_async().unwrap();
    futures::executor::block_on(handle.wait()).expect("the job recovers and finishes");
    let wall = started.elapsed();
    let stats = handle.failover_stats();
    assert_eq!(stats.restarts, 1, "{failover:?}: {stats:?}");
    assert!(
        (DELAY.as_millis() as u64..=wall.as_millis() as u64).contains(&stats.max_recovery_ms),
        "{failover:?}: recovery {} ms, expected between the delay {DELAY:?} and the run's {wall:?}",
        stats.max_recovery_ms
    );
    // Restarted from the beginning (no checkpoint): every record, some twice.
    let got: std::collections::BTreeSet<u64> = collected.take().into_iter().collect();
    assert!(got == (0..N).map(|i| i * 2).collect(), "{failover:?}");
}

#[test]
fn the_recovery_time_of_a_region_restart_is_recorded() {
    assert_recovery_time_recorded(floe::failover::FailoverStrategy::Region);
}

#[test]
fn the_recovery_time_of_a_full_restart_is_recorded() {
    assert_recovery_time_recorded(floe::failover::FailoverStrategy::All);
}
