//! Checkpoints end to end: a keyed sum checkpoints while it runs, the job is
//! canceled, and a new job restored from the checkpoint directory finishes
//! with the counts a plain HashMap computes over the whole input.

use crate::gated;
use floe::StreamExecutionEnvironment;
use floe::checkpoint::CheckpointConfig;
use gated::{Gate, gated_generator, wait_for_new_checkpoints};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const RECORDS: u64 = 60_000;
const WORDS: u64 = 37;

fn word(i: u64) -> String {
    format!("w{}", floe::text::mix64(i) % WORDS)
}

fn oracle() -> HashMap<String, u64> {
    let mut m = HashMap::new();
    for i in 0..RECORDS {
        *m.entry(word(i)).or_insert(0) += 1;
    }
    m
}

/// The counting job; with a `gate` its sources hold at half of their
/// input, so checkpoints happen mid-run however fast the machine.
fn job(
    parallelism: usize,
    dir: &Path,
    gate: Option<&Arc<Gate>>,
    restore: bool,
) -> (
    StreamExecutionEnvironment,
    floe::connectors::collect::Collected<(String, u64)>,
) {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(parallelism);
    env.set_batch_size(64);
    env.set_checkpoint_config(CheckpointConfig::every(Duration::from_millis(40)).with_dir(dir));
    if restore {
        env.restore_from(dir);
    }
    let words = match gate {
        Some(g) => gated_generator(&env, g, RECORDS, &[0.5], |i| (word(i), 1u64)),
        None => env.from_generator(RECORDS, |i| (word(i), 1u64)),
    }
    .uid("words");
    let counts = words
        .key_by_field(|t: &(String, u64)| &t.0)
        .sum(|t: &mut (String, u64)| &mut t.1)
        .uid("sum")
        .collect();
    (env, counts)
}

fn last_per_key(updates: Vec<(String, u64)>) -> HashMap<String, u64> {
    updates.into_iter().collect()
}

/// Runs the job until its sources hold at the gate and `n` checkpoints
/// completed after that, then cancels it; returns the checkpoints
/// completed and the records emitted before the gate (what the newest
/// checkpoint holds).
fn run_until_checkpoints(parallelism: usize, dir: &Path, n: u64) -> (u64, u64) {
    let gate = Gate::new();
    let (env, _) = job(parallelism, dir, Some(&gate), false);
    let handle = env.execute_async().expect("job starts");
    gate.wait_held(parallelism);
    wait_for_new_checkpoints(&handle, n);
    // The status snapshot carries the same history.
    let status = handle.status_snapshot();
    assert!(status.checkpoints.completed >= n);
    assert!(
        status
            .checkpoints
            .history
            .iter()
            .filter(|r| r.status == "completed")
            .count() as u64
            >= n
    );
    handle.cancel();
    let _ = futures::executor::block_on(handle.wait());
    (handle.checkpoint_stats().completed, gate.emitted())
}

#[test]
fn restore_after_cancel_gives_the_uninterrupted_counts() {
    for (before, after) in [(2, 2), (2, 3), (2, 1)] {
        let dir = tempfile::tempdir().unwrap();
        let (completed, emitted) = run_until_checkpoints(before, dir.path(), 2);
        assert!(completed >= 2);
        assert!(
            emitted > 0 && emitted < RECORDS,
            "{emitted} before the gate"
        );
        let (env, counts) = job(after, dir.path(), None, true);
        let result = env.execute().expect("restored job finishes");
        // The restored job resumed where the checkpoint was taken: it read
        // only what followed the gate.
        let replayed = result.operator("Keyed Sum").unwrap().records_in;
        assert_eq!(
            replayed,
            RECORDS - emitted,
            "restored job processed {replayed} of {RECORDS} records"
        );
        let got = last_per_key(counts.take());
        assert_eq!(got, oracle(), "parallelism {before} -> {after}");
    }
}
